/*
 * parse_float.c - ecg_parse_float(): decimal text to float, bit-identical to strtof(), faster.
 *
 * Grammar (that of strtof in the C locale, restricted to decimal input):
 *     [isspace]* [+-]? ( digits ( '.' digits? )? | '.' digits ) ( [eE] [+-]? digits )?
 * An exponent marker not followed by digits is not part of the number ("1e" parses "1"). Hex
 * floats, "inf" and "nan" are not numbers here ("0x1p3" parses "0"; "inf" parses nothing).
 * The bounds [p, end) are respected: nothing at or past end is read, no NUL is needed.
 *
 * How it is exact. The digits are scanned once into w (the first 19 significant digits, as a
 * uint64) and a decimal exponent q, so that the value is w * 10^q exactly when no nonzero digit
 * was dropped. Then, in order:
 *
 *  1. w <= 2^24 and |q| <= 10: w and 10^|q| (5^10 < 2^24) are exact floats, and one IEEE
 *     multiplication or division rounds the exact value once, to nearest: that is strtof's answer.
 *     The CSV reader's short-line paths (read_csv_short.c, a word or eight lines at a time)
 *     compute this same step inline for lines such as "-0.145" and rely on it: keep them in step.
 *
 *  2. w < 2^53 and |q| <= 22 (or w < 2^64 and |q| <= 27 in x87 extended precision, whose 64-bit
 *     significand holds w and 5^27 exactly): one multiplication or division gives x = RN_p(X),
 *     the exact value X rounded once to precision p (53 or 64). Converting x to float rounds a
 *     second time, and double rounding can differ from rounding X directly. It cannot here unless
 *     x is a float midpoint (exactly halfway between two adjacent floats), which we test for and
 *     then take the slow path. Proof: every float midpoint M in the normal range has 25
 *     significant bits, so it is representable in precision p, and RN_p is monotone; hence
 *     X < M implies x <= M, X > M implies x >= M, and X == M implies x == M. If x is no midpoint,
 *     then x lies strictly on the same side of every midpoint as X, i.e. in the same interval
 *     between consecutive midpoints, which is all that rounding to the nearest float depends on.
 *     The overflow threshold FLT_MAX + ulp/2 = 2^128 - 2^103 is such a midpoint too (treated the
 *     same way), and the range of w * 10^q here stays above FLT_MIN (>= 10^-27), so subnormals
 *     never arise.
 *
 *  3. Anything else (more than 19 significant digits with a nonzero one dropped, exponents
 *     outside the envelope, midpoints) is rewritten as a short canonical string and handed to
 *     strtof: "0.<at most 120 significant digits><1 if a nonzero digit was dropped>e<exponent>".
 *     That is exact because a float, or a midpoint between two floats, k * 2^e with k < 2^26 and
 *     e >= -150, has at most 113 significant decimal digits: cutting after 120 digits and keeping
 *     a nonzero "sticky" digit leaves the value strictly inside the same interval between
 *     representable midpoints, so strtof rounds it as it would the whole token. The exponent is
 *     clamped far outside the float range (|e| <= 99999), where the result is 0 or inf either way.
 *
 * Assumes the default rounding mode (to nearest) and, for step 2 on x86, the x87 precision
 * control left at its Linux default (64-bit significand). The sign is applied last: rounding to
 * nearest is symmetric, so -strtof("x") == strtof("-x") bit for bit, zero included.
 *
 * Threading: reentrant; no state.
 */
#include <float.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ecg.h"

/* Canonical-string limits of the slow path (see 3. above). */
#define SLOW_DIGITS 120
#define SLOW_EXP_CLAMP 99999
/* Exponent digits stop accumulating here; the sum with any digit-count shift stays huge. */
#define EXP_SATURATE 100000000000000000LL /* 1e17 */

static const float pow10_f[] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 1e8f, 1e9f, 1e10f};

static const double pow10_d[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

#if LDBL_MANT_DIG >= 64
#define LD_MAX_EXP10 27
static const long double pow10_ld[] = {1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,
                                       1e7L,  1e8L,  1e9L,  1e10L, 1e11L, 1e12L, 1e13L,
                                       1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L, 1e20L,
                                       1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};
#endif

static inline bool is_digit(char c)
{
    return (unsigned char)(c - '0') < 10;
}

/* isspace() in the C locale, which is what strtof skips. */
static inline bool is_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/*
 * Eight digits at once (SWAR, as in simdjson/fast_float): the bytes are loaded little-endian so
 * that the first character is the least significant byte, checked to be all '0'..'9', then
 * combined pairwise (x10, x100, x10000). Only used after the first nonzero digit and while
 * nd + 8 <= 19, so that w stays below 10^19 and counts exactly the significant digits.
 */
static inline uint64_t load_eight(const char *s)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | (unsigned char)s[i];
    return v;
}

static inline bool eight_digits(const char *s)
{
    uint64_t v = load_eight(s);
    return (((v & 0xf0f0f0f0f0f0f0f0u) |
             (((v + 0x0606060606060606u) & 0xf0f0f0f0f0f0f0f0u) >> 4)) == 0x3333333333333333u);
}

static inline uint32_t parse_eight(const char *s)
{
    const uint64_t mask = 0x000000ff000000ffu;
    const uint64_t mul1 = 100 + (1000000ull << 32);
    const uint64_t mul2 = 1 + (10000ull << 32);
    uint64_t v = load_eight(s) - 0x3030303030303030u;
    v = (v * 10) + (v >> 8);
    v = (((v & mask) * mul1) + (((v >> 16) & mask) * mul2)) >> 32;
    return (uint32_t)v;
}

/*
 * Slow path: the token [mant, mant_end) holds the digits and point (no sign, no exponent
 * marker); exp10 is the explicit exponent (saturated). Returns the magnitude as strtof would.
 */
static float slow_path(const char *mant, const char *mant_end, int64_t exp10)
{
    char text[SLOW_DIGITS + 32];
    size_t nd = 0;
    bool sticky = false;
    int64_t point = 0; /* value = 0.<digits> * 10^(point + exp10) */
    bool seen_point = false, seen_nonzero = false;

    text[0] = '0';
    text[1] = '.';
    for (const char *s = mant; s < mant_end; s++) {
        if (*s == '.') {
            seen_point = true;
            continue;
        }
        int d = *s - '0';
        if (!seen_nonzero) {
            if (d == 0) {
                if (seen_point)
                    point--;
                continue;
            }
            seen_nonzero = true;
        }
        if (!seen_point)
            point++;
        if (nd < SLOW_DIGITS)
            text[2 + nd++] = (char)('0' + d);
        else if (d != 0)
            sticky = true;
    }
    if (nd == 0)
        return 0.0f;
    if (sticky)
        text[2 + nd++] = '1';
    int64_t e = point + exp10;
    if (e > SLOW_EXP_CLAMP)
        e = SLOW_EXP_CLAMP;
    if (e < -SLOW_EXP_CLAMP)
        e = -SLOW_EXP_CLAMP;
    /* Append "e<exponent>" by hand: the exponent fits in 6 characters and a sign. */
    char *o = text + 2 + nd;
    *o++ = 'e';
    if (e < 0) {
        *o++ = '-';
        e = -e;
    }
    char rev[8];
    int r = 0;
    do {
        rev[r++] = (char)('0' + e % 10);
        e /= 10;
    } while (e);
    while (r)
        *o++ = rev[--r];
    *o = 0;
    return strtof(text, NULL);
}

const char *ecg_parse_float(const char *p, const char *end, float *out)
{
    const char *s = p;
    while (s < end && is_space(*s))
        s++;
    bool negative = false;
    if (s < end && (*s == '+' || *s == '-')) {
        negative = *s == '-';
        s++;
    }

    /* Mantissa: the first 19 significant digits go to w; q tracks the decimal exponent. */
    const char *mant = s;
    uint64_t w = 0;
    int nd = 0;
    int64_t q = 0;
    bool dropped = false; /* a nonzero digit beyond the 19th */
    while (w && nd <= 11 && end - s >= 8 && eight_digits(s)) {
        w = w * 100000000 + parse_eight(s);
        nd += 8;
        s += 8;
    }
    while (s < end && is_digit(*s)) {
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
    }
    size_t n_digits = (size_t)(s - mant);
    if (s < end && *s == '.') {
        const char *frac = ++s;
        while (w && nd <= 11 && end - s >= 8 && eight_digits(s)) {
            w = w * 100000000 + parse_eight(s);
            nd += 8;
            q -= 8;
            s += 8;
        }
        while (s < end && is_digit(*s)) {
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
        }
        n_digits += (size_t)(s - frac);
    }
    if (n_digits == 0) { /* "", "+", ".", "-.e5": no number */
        *out = 0.0f;
        return p;
    }
    const char *mant_end = s;

    int64_t exp10 = 0;
    if (s < end && (*s | 0x20) == 'e') {
        const char *e = s + 1;
        bool exp_negative = false;
        if (e < end && (*e == '+' || *e == '-')) {
            exp_negative = *e == '-';
            e++;
        }
        if (e < end && is_digit(*e)) {
            do {
                if (exp10 < EXP_SATURATE)
                    exp10 = exp10 * 10 + (*e - '0');
                e++;
            } while (e < end && is_digit(*e));
            if (exp_negative)
                exp10 = -exp10;
            s = e;
        }
    }
    q += exp10;

    float value;
    if (w == 0) {
        value = 0.0f;
        goto done;
    }
    if (!dropped) {
#if FLT_EVAL_METHOD == 0
        if (w <= (1u << 24) && q >= -10 && q <= 10) {
            value = (float)w;
            value = q < 0 ? value / pow10_f[-q] : value * pow10_f[q];
            goto done;
        }
        if (w < (UINT64_C(1) << 53) && q >= -22 && q <= 22) {
            double x = (double)w;
            x = q < 0 ? x / pow10_d[-q] : x * pow10_d[q];
            /* x is within the float normal range; its low 29 fraction bits place it inside
             * one float ulp: exactly 1 << 28 is a midpoint. */
            uint64_t bits;
            memcpy(&bits, &x, sizeof bits);
            if ((bits & ((UINT64_C(1) << 29) - 1)) != (UINT64_C(1) << 28)) {
                value = (float)x;
                goto done;
            }
        }
#endif
#if LDBL_MANT_DIG >= 64
        if (q >= -LD_MAX_EXP10 && q <= LD_MAX_EXP10) {
            long double x = (long double)w;
            x = q < 0 ? x / pow10_ld[-q] : x * pow10_ld[q];
            value = (float)x;
            long double back = value;
            if (back == x)
                goto done;
            if (value <= FLT_MAX) {
                /* Midpoint test against the neighbour on x's side (value > 0 here). */
                uint32_t bits;
                memcpy(&bits, &value, sizeof bits);
                bits = x > back ? bits + 1 : bits - 1;
                float neighbour;
                memcpy(&neighbour, &bits, sizeof neighbour);
                if (((long double)value + (long double)neighbour) * 0.5L != x)
                    goto done;
            }
        }
#endif
    }
    value = slow_path(mant, mant_end, exp10);
done:
    *out = negative ? -value : value;
    return s;
}
