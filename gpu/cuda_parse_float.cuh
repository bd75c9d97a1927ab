/*
 * cuda_parse_float.cuh - decimal text to float on the device (and the host), bit-identical to
 * ecg_parse_float() / strtof() for every token it accepts (gpu/ only).
 *
 * It follows step 2 of engine/parse_float.c: the first 19 significant digits into w, the
 * decimal exponent into q; when no nonzero digit was dropped, w < 2^53 and |q| <= 22, one IEEE
 * double multiplication or division rounds the exact value once, and converting to float rounds
 * correctly unless the double is exactly a float midpoint (parse_float.c proves this). Every
 * other token (more than 19 significant digits, large exponents, midpoints) is reported HARD:
 * the caller resolves it with ecg_parse_float on the host. Since both sides round correctly,
 * the results are bit-identical, the sign of zero included.
 *
 * Unlike ecg_parse_float, the token must be exactly [s, e): a number that does not use every
 * byte is BAD (the CSV reader refuses such fields; the host reader then reports the error).
 */
#ifndef ECG_GPU_CUDA_PARSE_FLOAT_CUH
#define ECG_GPU_CUDA_PARSE_FLOAT_CUH

#include <stdint.h>

enum token_kind { TOKEN_OK = 0, TOKEN_HARD = 1, TOKEN_BAD = 2 };

__host__ __device__ static inline double pow10_exact(int q)
{
    /* 10^q for 0 <= q <= 22: exact doubles, built by exact multiplications */
    double p = 1.0;
    for (int i = 0; i < q; i++)
        p *= 10.0;
    return p;
}

__host__ __device__ static inline int parse_token(const char *s, const char *e, float *out)
{
    bool negative = false;
    *out = 0.0f;
    if (s < e && (*s == '+' || *s == '-')) {
        negative = *s == '-';
        s++;
    }
    uint64_t w = 0;
    int nd = 0;
    int64_t q = 0;
    bool dropped = false;
    size_t n_digits = 0;
    while (s < e && (unsigned char)(*s - '0') < 10) {
        unsigned d = (unsigned)(*s - '0');
        if (nd < 19) {
            if (w | d) {
                w = w * 10 + d;
                nd++;
            }
        } else {
            q++;
            dropped |= d != 0;
        }
        s++;
        n_digits++;
    }
    if (s < e && *s == '.') {
        s++;
        while (s < e && (unsigned char)(*s - '0') < 10) {
            unsigned d = (unsigned)(*s - '0');
            if (nd < 19) {
                if (w | d) {
                    w = w * 10 + d;
                    nd++;
                }
                q--;
            } else {
                dropped |= d != 0;
            }
            s++;
            n_digits++;
        }
    }
    if (n_digits == 0)
        return TOKEN_BAD;
    if (s < e && (*s | 0x20) == 'e') {
        const char *x = s + 1;
        bool exp_negative = false;
        int64_t exp10 = 0;
        if (x < e && (*x == '+' || *x == '-')) {
            exp_negative = *x == '-';
            x++;
        }
        if (!(x < e && (unsigned char)(*x - '0') < 10))
            return TOKEN_BAD; /* "1e" parses as "1" and leaves "e": not the whole field */
        while (x < e && (unsigned char)(*x - '0') < 10) {
            if (exp10 < 100000000000000000LL)
                exp10 = exp10 * 10 + (*x - '0');
            x++;
        }
        q += exp_negative ? -exp10 : exp10;
        s = x;
    }
    if (s != e)
        return TOKEN_BAD;
    if (w == 0) {
        *out = negative ? -0.0f : 0.0f;
        return TOKEN_OK;
    }
    if (dropped || w >= (UINT64_C(1) << 53) || q < -22 || q > 22)
        return TOKEN_HARD;
    double x = (double)w;
    x = q < 0 ? x / pow10_exact((int)-q) : x * pow10_exact((int)q);
    union {
        double d;
        uint64_t u;
    } bits;
    bits.d = x;
    if ((bits.u & ((UINT64_C(1) << 29) - 1)) == (UINT64_C(1) << 28))
        return TOKEN_HARD; /* a float midpoint: double rounding could differ */
    float v = (float)x;
    *out = negative ? -v : v;
    return TOKEN_OK;
}

#endif /* ECG_GPU_CUDA_PARSE_FLOAT_CUH */
