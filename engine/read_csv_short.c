/*
 * read_csv_short.c - lines that each hold a short number alone ("-0.02", "0.145"), the body
 * of a typical strip, read without a call per line: read_csv.c's fast path (csv_short_lines,
 * read_internal.h). Two ways of reading the same lines to the same bits:
 *   - a word at a time (csv_short_word): each line's body as one 64-bit word, its newline
 *     found 64 bytes at once ahead of the parse; any x86-64;
 *   - eight lines at a time in AVX2 (csv_short_avx2): eight lines' last 8 bytes loaded into
 *     two registers and read side by side, where the CPU has AVX2 (chosen at run time): about
 *     twice as fast on a 10-s strip (bench_readers; bench/RESULTS.md).
 *
 * The grammar both take: -? B \r? \n, where the body B is 1 to SHORT_BODY_MAX bytes, all digits
 * but for at most one '.', with at least one digit, and its digits (leading zeros included)
 * make an integer w <= 2^24 (always true with a '.', which leaves at most 7 digits; 8 digits
 * alone may exceed it).
 *
 * Why it is exact: such a line is one read_csv.c's ecg_parse_float path would take (a number
 * that starts the line, LF or CR LF right after it), and ecg_parse_float reads it as w * 10^q
 * with the same integer w (at most 8 digits, none dropped) and q = -(digits after the '.'),
 * -7 <= q <= 0; so it takes its step 1 (w <= 2^24, |q| <= 10: see parse_float.c) and returns
 * (float)w / 10^-q (times 1 when q = 0; 0 when w = 0), negated for '-'. Both ways compute
 * (float)w / 10^-q, the same IEEE operation on the same operands (x / 1 and x * 1 are both x,
 * and 0 / 10^-q is +0; VDIVPS rounds as DIVSS does), then flip the sign bit for '-', as the
 * unary minus does: the bits are the same, strtof's. The values are finite. Compiled only
 * where ecg_parse_float's step 1 is (FLT_EVAL_METHOD == 0); elsewhere no line is taken.
 *
 * Threading: reentrant, no state.
 */
#include <float.h>
#include <stdint.h>
#include <string.h>

#include <immintrin.h> /* SSE2 (x86-64's baseline) always; AVX2 in functions that target it */

#include "read_internal.h"

#define BYTES_01 0x0101010101010101u
#define BYTES_7F 0x7f7f7f7f7f7f7f7fu
#define BYTES_80 0x8080808080808080u

/* A short line's body (after the sign, before CR LF) is at most this long: 8 bytes, one word. */
#define SHORT_BODY_MAX 8

static const float pow10_f[8] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f};

/* Eight bytes as a little-endian word: the first byte is the least significant. */
static inline uint64_t load_word(const char *s)
{
    uint64_t v;
    memcpy(&v, s, sizeof v);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* Bit 7 of each byte: that byte is not '0'..'9'. With x = c ^ '0', c is a digit exactly when
 * x < 10, i.e. neither x's bit 7 nor that of (x & 0x7f) + 0x76 is set; no sum leaves its byte. */
static inline uint64_t non_digit_bytes(uint64_t v)
{
    uint64_t x = v ^ ('0' * BYTES_01);
    return (((x & BYTES_7F) + 0x76 * BYTES_01) | x) & BYTES_80;
}

/* The positions of the '\n' bytes of [s, s + 64), as the bits of a word (bit i: s[i]). */
static inline uint64_t newline_mask(const char *s)
{
    /* four 16-byte compares, each byte's result bit gathered by movemask */
    const __m128i nl = _mm_set1_epi8('\n');
    uint64_t mask = 0;
    for (int i = 0; i < 4; i++) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)(const void *)(s + 16 * i));
        mask |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(bytes, nl)) << (16 * i);
    }
    return mask;
}

/*
 * The value of the first k digit bytes of v (1 <= k <= 8): moved to the top bytes with zeros
 * below, they read as the eight digits "000ddddd", combined pairwise (x10, x100, x10000) as in
 * parse_float.c. Subtracting '0' borrows into the next byte only out of a byte below '0', and
 * the bytes past the k digits are shifted out.
 */
static inline uint32_t digits_value(uint64_t v, unsigned k)
{
    const uint64_t mask = 0x000000ff000000ffu;
    const uint64_t mul1 = 100 + (1000000ull << 32);
    const uint64_t mul2 = 1 + (10000ull << 32);
    v = (v - 0x30 * BYTES_01) << (8 * (8 - k));
    v = (v * 10) + (v >> 8);
    v = (((v & mask) * mul1) + (((v >> 16) & mask) * mul2)) >> 32;
    return (uint32_t)v;
}

/*
 * The line [ls, nl) (nl its '\n') as a short number: true with *value set, or false. Reads the
 * 8 bytes from the body's start, which must lie inside the input (the body starts at or before
 * nl, so 8 readable bytes past nl suffice).
 */
static inline bool short_value(const char *ls, const char *nl, float *value)
{
    /* arithmetic, not a branch: the signs of samples come in no order */
    unsigned negative = *ls == '-';
    const char *body = ls + negative;
    const char *body_end = nl > body && nl[-1] == '\r' ? nl - 1 : nl;
    size_t len = (size_t)(body_end - body);
    if (len - 1 >= SHORT_BODY_MAX) /* empty, or too long */
        return false;
    uint64_t word = load_word(body);
    uint64_t in_body = BYTES_80 >> (8 * (SHORT_BODY_MAX - len));
    /* At most one byte of the body is no digit, and that one is '.'. */
    uint64_t odd = non_digit_bytes(word) & in_body;
    uint64_t dot = odd >> 7; /* 1 << (8 * its index), or 0 */
    if ((odd & (odd - 1)) || (word & dot * 0xff) != dot * '.' || odd == in_body)
        return false;
    /* Drop the '.': the bytes above it move down one. */
    uint64_t below = dot - 1; /* all ones without a '.' */
    word = (word & below) | ((word >> 8) & ~below);
    unsigned frac_digits = (unsigned)__builtin_popcountll(in_body & ~(below | odd));
    uint32_t w = digits_value(word, (unsigned)len - (dot != 0));
    if (w > (UINT32_C(1) << 24))
        return false;
    float v = (float)w / pow10_f[frac_digits];
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    bits ^= (uint32_t)negative << 31;
    memcpy(value, &bits, sizeof bits);
    return true;
}

/* The last full 64-byte block a run looks at starts 72 bytes or more before the end: every
 * 8-byte load from a body (at or before its newline) then stays inside. */
#define TAIL_BYTES (64 + 8)

size_t csv_short_word(const char *begin, const char *end, const char **pp, float *v, size_t room,
                      bool *full)
{
    (void)begin;
    *full = false;
#if FLT_EVAL_METHOD == 0
    const char *ls = *pp; /* start of the line being read */
    size_t n = 0;
    for (const char *block = ls; end - block >= TAIL_BYTES; block += 64) {
        for (uint64_t newlines = newline_mask(block); newlines; newlines &= newlines - 1) {
            const char *nl = block + __builtin_ctzll(newlines);
            float value;
            if (!short_value(ls, nl, &value))
                goto stop;
            if (n == room) {
                *full = true;
                goto stop;
            }
            v[n++] = value;
            ls = nl + 1;
        }
        /* No newline yet and the line is already too long to be short: leave it. */
        if (block + 64 - ls > 1 + SHORT_BODY_MAX + 1)
            break;
    }
stop:
    *pp = ls;
    return n;
#else
    (void)end, (void)pp, (void)v, (void)room;
    return 0;
#endif
}

#if FLT_EVAL_METHOD == 0 && defined(__x86_64__)

/*
 * Eight short lines' values at once, or false. Line i runs from just after nl[i] to nl[i + 1]
 * (offsets from origin; nl[i] + 1 of the first may be the run's start). Each lane takes the 8
 * bytes that end at its newline: a line of at most 8 bytes (sign, body, CR) lies in them,
 * ending in the top byte, so the body's digits are already where digits_value moves them, with
 * the bytes before the line (masked off) below. The tests and the arithmetic are
 * short_value's, lane by lane: false where any lane is not a short line of at most 8 bytes (the
 * caller then reads the eight one by one, short_value taking the longer ones). The loads read
 * [origin + nl[i + 1] - 8, origin + nl[i + 1]): the caller checks the first lies inside.
 */
__attribute__((target("avx2"))) static inline bool
eight_lines_avx2(const char *origin, const int32_t *nl, float *out)
{
    const __m256i zero = _mm256_setzero_si256(), ones = _mm256_set1_epi64x(-1);
    const __m256i one = _mm256_set1_epi64x(1), eight = _mm256_set1_epi64x(8);
    const __m256i b80 = _mm256_set1_epi64x((long long)BYTES_80);
    const __m256i b7f = _mm256_set1_epi64x((long long)BYTES_7F);
    const __m256i b76 = _mm256_set1_epi64x((long long)(0x76 * BYTES_01));
    const __m256i b30 = _mm256_set1_epi8('0');

    __m256i ends = _mm256_loadu_si256((const __m256i *)(const void *)(nl + 1));
    __m256i starts = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(const void *)nl),
                                      _mm256_set1_epi32(1));
    __m256i line_len = _mm256_sub_epi32(ends, starts); /* bytes before the '\n', CR included */
    __m256i bad = _mm256_or_si256(_mm256_cmpgt_epi32(line_len, _mm256_set1_epi32(8)),
                                  _mm256_cmpgt_epi32(_mm256_set1_epi32(1), line_len));

    __m256i w_half[2], frac_half[2], neg_half[2];
    for (int h = 0; h < 2; h++) {
        __m128i len_h = h ? _mm256_extracti128_si256(line_len, 1)
                          : _mm256_castsi256_si128(line_len);
        /* four loads, not a gather: gathers are microcoded slowly on some CPUs */
        const int32_t *e = nl + 1 + 4 * h;
        __m256i word = _mm256_setr_epi64x(
            (long long)load_word(origin + e[0] - 8), (long long)load_word(origin + e[1] - 8),
            (long long)load_word(origin + e[2] - 8), (long long)load_word(origin + e[3] - 8));
        __m256i len = _mm256_cvtepi32_epi64(len_h);
        /* CR before the '\n': the line ends one byte lower; shift it back to the top */
        __m256i cr = _mm256_cmpeq_epi64(_mm256_srli_epi64(word, 56), _mm256_set1_epi64x('\r'));
        word = _mm256_blendv_epi8(word, _mm256_slli_epi64(word, 8), cr);
        len = _mm256_add_epi64(len, cr); /* cr is -1 where there is one */
        /* the line's first byte, 8 - len bytes up: a '-' is the sign, the body follows */
        __m256i first = _mm256_and_si256(
            _mm256_srlv_epi64(word, _mm256_slli_epi64(_mm256_sub_epi64(eight, len), 3)),
            _mm256_set1_epi64x(0xff));
        __m256i negative = _mm256_cmpeq_epi64(first, _mm256_set1_epi64x('-'));
        __m256i body_len = _mm256_add_epi64(len, negative);
        /* bit 7 of the body's bytes, the top body_len (a shift of 64 leaves none) */
        __m256i in_body =
            _mm256_sllv_epi64(b80, _mm256_slli_epi64(_mm256_sub_epi64(eight, body_len), 3));
        __m256i x = _mm256_xor_si256(word, b30);
        __m256i odd = _mm256_and_si256(
            _mm256_and_si256(_mm256_or_si256(_mm256_add_epi64(_mm256_and_si256(x, b7f), b76), x),
                             b80),
            in_body);
        /* at most one byte of the body is no digit, that one is '.', and one is a digit */
        __m256i dot_byte = _mm256_cmpeq_epi8(odd, b80);
        bad = _mm256_or_si256(
            bad, _mm256_andnot_si256(_mm256_cmpeq_epi64(
                                         _mm256_and_si256(odd, _mm256_sub_epi64(odd, one)), zero),
                                     ones));
        bad = _mm256_or_si256(
            bad, _mm256_andnot_si256(
                     _mm256_cmpeq_epi64(_mm256_and_si256(word, dot_byte),
                                        _mm256_and_si256(dot_byte, _mm256_set1_epi8('.'))),
                     ones));
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi64(odd, in_body));
        /* drop the '.': the bytes below it move up one (here the body ends at the top) */
        __m256i has_dot = _mm256_andnot_si256(_mm256_cmpeq_epi64(odd, zero), ones);
        __m256i below =
            _mm256_and_si256(_mm256_sub_epi64(_mm256_srli_epi64(odd, 7), one), has_dot);
        __m256i above = _mm256_andnot_si256(_mm256_or_si256(below, dot_byte), ones);
        word = _mm256_or_si256(_mm256_and_si256(word, above),
                               _mm256_slli_epi64(_mm256_and_si256(word, below), 8));
        /* the digits, the top body_len - has_dot bytes, as 0..9 with zeros below: first
         * byte (lowest) the most significant, combined pairwise x10, x100, x10000 */
        __m256i digits_len = _mm256_add_epi64(body_len, has_dot);
        __m256i top = _mm256_sllv_epi64(ones, _mm256_slli_epi64(_mm256_sub_epi64(eight, digits_len), 3));
        __m256i d = _mm256_and_si256(_mm256_sub_epi8(word, b30), top);
        d = _mm256_maddubs_epi16(d, _mm256_set1_epi16(0x010a));
        d = _mm256_madd_epi16(d, _mm256_set1_epi32(0x00010064));
        __m256i w = _mm256_add_epi64(_mm256_mul_epu32(d, _mm256_set1_epi64x(10000)),
                                     _mm256_srli_epi64(d, 32));
        bad = _mm256_or_si256(bad, _mm256_cmpgt_epi64(w, _mm256_set1_epi64x(1 << 24)));
        /* digits after the '.': body bytes above it, counted by a byte sum */
        __m256i after = _mm256_and_si256(_mm256_and_si256(in_body, above), has_dot);
        frac_half[h] = _mm256_sad_epu8(_mm256_srli_epi64(after, 7), zero);
        w_half[h] = w;
        neg_half[h] = negative;
    }
    if (!_mm256_testz_si256(bad, bad))
        return false;
    /* lanes 0-3 and 4-7: the low halves of each pair of 64-bit lanes, in line order */
    const __m256i order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
#define PACK(p) \
    _mm256_permutevar8x32_epi32(_mm256_blend_epi32((p)[0], _mm256_slli_epi64((p)[1], 32), 0xaa), order)
    __m256i w = PACK(w_half), frac = PACK(frac_half), negative = PACK(neg_half);
#undef PACK
    __m256 value = _mm256_div_ps(_mm256_cvtepi32_ps(w),
                                 _mm256_permutevar8x32_ps(_mm256_loadu_ps(pow10_f), frac));
    value = _mm256_xor_ps(value, _mm256_castsi256_ps(_mm256_slli_epi32(negative, 31)));
    _mm256_storeu_ps(out, value);
    return true;
}

/*
 * The count lines after nl[0] (line i from nl[i] + 1 to nl[i + 1]) read one by one by
 * short_value into v[*n, room): returns how many were read, fewer than count at a line that is
 * not short or, with *full set, when the room ran out before it.
 */
static size_t one_by_one(const char *origin, const int32_t *nl, size_t count, float *v,
                         size_t *n, size_t room, bool *full)
{
    size_t i = 0;
    for (; i < count; i++) {
        float value;
        if (!short_value(origin + nl[i] + 1, origin + nl[i + 1], &value))
            break;
        if (*n == room) {
            *full = true;
            break;
        }
        v[(*n)++] = value;
    }
    return i;
}

/* One call reads at most this many bytes, so that offsets from its start fit in 32 bits. */
#define AVX2_SPAN ((size_t)1 << 30)

__attribute__((target("avx2"))) size_t csv_short_avx2(const char *begin, const char *end,
                                                      const char **pp, float *v, size_t room,
                                                      bool *full)
{
    const char *const origin = *pp;
    if ((size_t)(end - origin) > AVX2_SPAN)
        end = origin + AVX2_SPAN;
    /* nl[0]: the newline before the next line to read (-1: the run's start); nl[1..pending]:
     * the newlines found after it, lines not read yet. At most 7 wait while a block adds 64. */
    int32_t nl[1 + 7 + 64];
    size_t pending = 0, n = 0;
    nl[0] = -1;
    *full = false;
    for (const char *block = origin; end - block >= TAIL_BYTES; block += 64) {
        int32_t base = (int32_t)(block - origin);
        /* eight positions a step whatever the count, so that the loop's end is predictable;
         * the entries past the count are never read (bit 63 keeps ctz defined) */
        uint64_t m = newline_mask(block);
        size_t count = (size_t)__builtin_popcountll(m);
        for (int32_t *at = nl + 1 + pending, *stop = at + count; at < stop; at += 8) {
            for (int j = 0; j < 8; j++) {
                at[j] = base + __builtin_ctzll(m | (UINT64_C(1) << 63));
                m &= m - 1;
            }
        }
        pending += count;
        size_t done = 0;
        for (; pending - done >= 8; done += 8) {
            /* the first lane's 8 bytes must not start before the input */
            if (room - n >= 8 && nl[done + 1] - 8 >= begin - origin &&
                eight_lines_avx2(origin, nl + done, v + n)) {
                n += 8;
                continue;
            }
            size_t got = one_by_one(origin, nl + done, 8, v, &n, room, full);
            if (got < 8) {
                *pp = origin + nl[done + got] + 1;
                return n;
            }
        }
        memmove(nl, nl + done, (pending - done + 1) * sizeof nl[0]);
        pending -= done;
        /* No newline yet and the line is already too long to be short: leave it. */
        if (block + 64 - (origin + nl[pending] + 1) > 1 + SHORT_BODY_MAX + 1)
            break;
    }
    /* the last lines found, fewer than eight */
    *pp = origin + nl[one_by_one(origin, nl, pending, v, &n, room, full)] + 1;
    return n;
}

#endif

size_t csv_short_lines(const char *begin, const char *end, const char **pp, float *v, size_t room,
                       bool *full)
{
#if FLT_EVAL_METHOD == 0 && defined(__x86_64__)
    if (__builtin_cpu_supports("avx2"))
        return csv_short_avx2(begin, end, pp, v, room, full);
#endif
    return csv_short_word(begin, end, pp, v, room, full);
}
