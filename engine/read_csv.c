/*
 * read_csv.c - delimited text: one or more numeric columns, one sample per row.
 *
 * Accepted: LF or CRLF line ends; blank (or all-space) lines anywhere; an optional UTF-8 byte
 * order mark; an optional header row (the first non-blank line, when its chosen field - or, for
 * a lead chosen by name, any field - starts with a letter, '_' or a quote); columns separated
 * by ';', ',' or tab (whichever the first non-blank line uses, in that order of preference, but
 * tab where a tab separates text on a line that also has a ',': tab_separates);
 * spaces around fields. With ';' between columns, a comma in a number is its decimal mark
 * ("1,25;1,30", as European spreadsheets export): a comma cannot separate columns there, so it
 * is read as '.' (a field holding both ',' and '.' is refused, not guessed); so is a comma in a
 * tab-separated file (unless no number rules a thousands separator out: tab_comma) and in a
 * file of one column, and a file of one number per line written with decimal commas
 * ("-0,145", the one-column export of such a spreadsheet) is read as one column, not as two
 * split at the comma (comma_file: when its lines rule out the other readings; refused when
 * they do not). The signal records when a decimal comma was read. Only the selected column
 * (opts->lead: 0-based index, or a header name) must hold numbers; every field of the rows must
 * still be text (no control bytes). Numbers are decimal (ecg_parse_float): "nan", "inf" and values
 * beyond the float range are refused with their line and column.
 *
 * Speed: the file is scanned once, in place, with no per-line allocation; the output grows
 * geometrically. Column 0 has two fast paths. Lines of a short number alone, such as
 * "-0.02" or "0.145" (the body of a typical strip), are read eight at a time (AVX2) or a
 * word at a time, with no call per line (short_lines, read_csv_short.c); other lines that
 * hold a number alone are parsed with one ecg_parse_float call and a check that LF or CRLF
 * follows. Lines with several columns or spaces take the general path.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ecg.h"
#include "read_internal.h"

struct csv_state {
    const char *begin; /* the input */
    const char *end;
    char delim;      /* ',', ';', '\t', or 0 for a single column */
    size_t line;     /* 1-based number of the line being read */
    bool comma_mark; /* a ',' in a number is its decimal mark (';' files, comma_file) */
    bool comma_seen; /* one-column files: comma_file has judged the data rows */
    bool comma_read; /* a number was read with one */
    /* tab files: whether a number read with a decimal comma ruled out a thousands separator,
     * and the first such number (for ambiguous_csv) */
    bool comma_not_thousands;
    size_t comma_line;
    char comma_text[4 * READ_QUOTE_MAX + 8];
};

static inline bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* A byte that can open a number (ecg_parse_float would skip spaces and newlines). */
static inline bool starts_number(char c)
{
    return (unsigned char)(c - '0') < 10 || c == '-' || c == '+' || c == '.';
}

static inline enum ecg_status push(struct sample_buf *sb, float v, struct ecg_error *err)
{
    if (sb->n == sb->cap) {
        enum ecg_status status = sample_buf_reserve(sb, 1, err);
        if (status != ECG_OK)
            return status;
    }
    sb->v[sb->n++] = v;
    return ECG_OK;
}

/* ---------------------------------------------------------------- short numbers */

/* Lines left to the other paths after short_lines took none: from MIN, doubling up to MAX. */
#define SHORT_RETRY_MIN 16
#define SHORT_RETRY_MAX 1024

/*
 * Reads, from *pp, the run of lines that each hold a short number alone (csv_short_lines,
 * read_csv_short.c: "-0.02", "0.145", bit for bit what the other paths read). It stops at the
 * first other line, and before the last 72 bytes or so of the input (left to the caller). The
 * values go to sb; *pp and st->line move past the lines taken. Returns ECG_OK, or
 * sample_buf_reserve's status (max_samples reached, out of memory) with *pp at the line that
 * did not fit.
 */
static enum ecg_status short_lines(struct csv_state *st, const char **pp, struct sample_buf *sb,
                                   struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    size_t n_first = sb->n;
    for (;;) {
        bool full;
        float *room_at = sb->v ? sb->v + sb->n : NULL;
        sb->n += csv_short_lines(st->begin, st->end, pp, room_at, sb->cap - sb->n, &full);
        if (!full)
            break;
        status = sample_buf_reserve(sb, 1, err);
        if (status != ECG_OK)
            break;
    }
    st->line += sb->n - n_first;
    return status;
}

/* End of the line that starts at p: the '\n' (or end); a '\r' before it is not included. */
static const char *line_end(const char *p, const char *end, const char **next)
{
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) {
        *next = end;
        nl = end;
    } else {
        *next = nl + 1;
    }
    if (nl > p && nl[-1] == '\r')
        nl--;
    return nl;
}

/* Field [*fs, *fe) trimmed of spaces (and of tabs when tab is not the delimiter). */
static void trim_field(const struct csv_state *st, const char **fs, const char **fe)
{
    const char *s = *fs, *e = *fe;
    while (s < e && (*s == ' ' || (*s == '\t' && st->delim != '\t')))
        s++;
    while (e > s && (e[-1] == ' ' || (e[-1] == '\t' && st->delim != '\t')))
        e--;
    *fs = s;
    *fe = e;
}

/* End of the field starting at p within a line ending at le: the delimiter or le. */
static const char *field_end(const struct csv_state *st, const char *p, const char *le)
{
    if (!st->delim)
        return le;
    const char *d = memchr(p, st->delim, (size_t)(le - p));
    return d ? d : le;
}

/* Refuses control bytes (NUL, escape...) in a line: binary data is not text. */
static enum ecg_status check_text(const struct csv_state *st, const char *ls, const char *le,
                                  struct ecg_error *err)
{
    for (const char *c = ls; c < le; c++) {
        unsigned char u = (unsigned char)*c;
        if (u < 0x20 && u != '\t') {
            char q[4 * READ_QUOTE_MAX + 8];
            read_quote(q, sizeof q, ls, (size_t)(le - ls));
            return ecg_fail(err, ECG_ERR_FORMAT, "bad_csv",
                            "line %zu: control byte 0x%02x at byte %zu of the line, not text: "
                            "\"%s\"",
                            st->line, u, (size_t)(c - ls) + 1, q);
        }
    }
    return ECG_OK;
}

/* True if a field looks like a column name rather than a value. */
static bool looks_like_name(const char *s, const char *e)
{
    if (s == e)
        return false;
    char c = *s;
    bool name_start =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == '"' || c == '\'';
    if (!name_start)
        return false;
    /* Spelled-out non-numbers are bad values, not names. */
    static const char *const specials[] = {"nan", "inf", "infinity", "null", "none"};
    size_t len = (size_t)(e - s);
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        if (len == strlen(specials[i]) && strncasecmp(s, specials[i], len) == 0)
            return false;
    return true;
}

/* Reports a bad value in the selected column: NaN/Inf spelled out, or not a number. */
static enum ecg_status bad_value(const struct csv_state *st, size_t column, const char *fs,
                                 const char *fe, struct ecg_error *err)
{
    char q[4 * READ_QUOTE_MAX + 8];
    read_quote(q, sizeof q, fs, (size_t)(fe - fs));
    const char *s = fs;
    if (s < fe && (*s == '+' || *s == '-'))
        s++;
    size_t len = (size_t)(fe - s);
    bool spelled = (len == 3 && (strncasecmp(s, "nan", 3) == 0 || strncasecmp(s, "inf", 3) == 0)) ||
                   (len == 8 && strncasecmp(s, "infinity", 8) == 0);
    if (spelled)
        return ecg_fail(err, ECG_ERR_FORMAT, "nan_in_input",
                        "line %zu, column %zu: \"%s\" is not a finite number", st->line, column + 1,
                        q);
    if (fs == fe)
        return ecg_fail(err, ECG_ERR_FORMAT, "bad_csv",
                        "line %zu, column %zu: expected a number, got an empty field", st->line,
                        column + 1);
    return ecg_fail(err, ECG_ERR_FORMAT, "bad_csv",
                    "line %zu, column %zu: expected a number, got \"%s\"", st->line, column + 1, q);
}

/* Reports a number at p (in the selected column) that overflowed the float range. */
static enum ecg_status out_of_range(const struct csv_state *st, size_t column, const char *p,
                                    struct ecg_error *err)
{
    const char *fe = p;
    while (fe < st->end && *fe != '\n' && *fe != '\r' && *fe != st->delim && !is_blank(*fe))
        fe++;
    char q[4 * READ_QUOTE_MAX + 8];
    read_quote(q, sizeof q, p, (size_t)(fe - p));
    return ecg_fail(err, ECG_ERR_FORMAT, "nan_in_input",
                    "line %zu, column %zu: \"%s\" is outside the float range", st->line, column + 1,
                    q);
}

/* Whether a tab of [ls, le) separates two fields rather than pads one: text other than a ','
 * on both sides of it, blanks skipped ("-0,02<TAB>1,5", not "0.1,<TAB>0.2"). */
static bool tab_separates(const char *ls, const char *le)
{
    for (const char *t = ls; (t = memchr(t, '\t', (size_t)(le - t))) != NULL; t++) {
        const char *a = t, *b = t + 1;
        while (a > ls && is_blank(a[-1]))
            a--;
        while (b < le && (is_blank(*b) || *b == '\r'))
            b++;
        if (a > ls && b < le && a[-1] != ',' && *b != ',')
            return true;
    }
    return false;
}

char read_csv_delimiter(const char *ls, const char *le)
{
    const size_t n = (size_t)(le - ls);
    if (memchr(ls, ';', n))
        return ';';
    if (memchr(ls, ',', n))
        return tab_separates(ls, le) ? '\t' : ',';
    return memchr(ls, '\t', n) ? '\t' : 0;
}

/*
 * Reads the header row [ls, le): finds the column named `name` (quotes stripped, exact match
 * first, then case-insensitive) or, for an index, the column's label. Sets *column and the
 * signal's lead label.
 */
static enum ecg_status header_select(const struct csv_state *st, const char *ls, const char *le,
                                     const char *name, long index, size_t *column,
                                     struct ecg_signal *out, struct ecg_error *err)
{
    for (int pass = 0; pass < 2; pass++) {
        size_t col = 0;
        const char *p = ls;
        for (;;) {
            const char *fe = field_end(st, p, le);
            const char *s = p, *e = fe;
            trim_field(st, &s, &e);
            if (e - s >= 2 && (*s == '"' || *s == '\'') && e[-1] == *s)
                s++, e--;
            size_t len = (size_t)(e - s);
            bool match =
                name ? (len == strlen(name) &&
                        (pass == 0 ? strncmp(s, name, len) == 0 : strncasecmp(s, name, len) == 0))
                     : (long)col == index;
            if (match) {
                *column = col;
                read_set_lead(out, s, len);
                return ECG_OK;
            }
            if (fe == le)
                break;
            p = fe + 1;
            col++;
        }
        if (!name)
            return ecg_fail(err, ECG_ERR_NOT_FOUND, "lead_not_found",
                            "column %ld does not exist: the header (line %zu) has %zu columns",
                            index, st->line, col + 1);
    }
    char q[4 * READ_QUOTE_MAX + 8];
    read_quote(q, sizeof q, name, strlen(name));
    return ecg_fail(err, ECG_ERR_NOT_FOUND, "lead_not_found",
                    "no column named \"%s\" in the header (line %zu)", q, st->line);
}

/*
 * Decimal commas in one column. A spreadsheet whose locale writes ',' as the decimal mark saves
 * a one-column sheet as "-0,145" per line: no delimiter, since there is one column (with
 * several it separates them with ';', which read_csv_column already reads). Read as columns
 * split by ',', such a file gives the integer parts as the signal, a silent wrong answer. So
 * when the first line has a ',' (or, where it has no delimiter, a data row has one) and every
 * non-blank data row is one number written as digits with at most one ',' between two runs of
 * them ("-0,02", "1,5", "0": no '.', no exponent, no other delimiter), the file is read as one
 * column with a decimal comma once both other readings are ruled out:
 *  - two integer columns ("12,512"): ruled out by a line with no ',' (a CSV writer gives every
 *    row its fields), a part after the ',' with a leading zero ("0,05": nobody pads an integer)
 *    or a part before it written "-0";
 *  - one column of integers with a thousands separator ("1,024"): ruled out by a part before
 *    the ',' that is 0 or -0, or a part after it of other than three digits.
 * Where two columns are not ruled out (every line "12,512" or "1,25"), the file reads as two
 * integer columns, as before; where they are but a thousands separator is not ("512", "1,024"),
 * it is refused (ambiguous_csv) rather than guessed. The answer says when a decimal comma was
 * read (signal.decimal_mark).
 */
enum comma_reading { COMMA_COLUMNS = 0, COMMA_DECIMAL, COMMA_AMBIGUOUS };

/* Whether a number whose digits before its ',' are [i, comma) and after it frac_len long
 * rules a thousands separator out: a part before that is 0, or one after of other than three
 * digits. */
static bool comma_not_thousands(const char *i, const char *comma, size_t frac_len)
{
    return (comma - i == 1 && *i == '0') || frac_len != 3;
}

/* [*s, *e) without its leading and trailing blanks and a trailing CR. */
static void trim_line(const char **s, const char **e)
{
    while (*s < *e && is_blank(**s))
        (*s)++;
    while (*e > *s && (is_blank((*e)[-1]) || (*e)[-1] == '\r'))
        (*e)--;
}

/* Whether [s, e) (a line, trimmed of spaces and CR) is such a number; what it rules out. */
static bool comma_number(const char *s, const char *e, bool *not_columns, bool *not_thousands)
{
    const char *i = s;
    bool negative = false;
    if (i < e && (*i == '-' || *i == '+'))
        negative = *i++ == '-';
    const char *int_start = i;
    while (i < e && (unsigned char)(*i - '0') < 10)
        i++;
    const size_t int_len = (size_t)(i - int_start);
    if (int_len == 0)
        return false;
    if (i == e) { /* a whole number: no row of two columns looks like this */
        *not_columns = true;
        return true;
    }
    if (*i != ',')
        return false;
    const char *frac = ++i;
    while (i < e && (unsigned char)(*i - '0') < 10)
        i++;
    const size_t frac_len = (size_t)(i - frac);
    if (frac_len == 0 || i != e)
        return false;
    if ((frac_len > 1 && *frac == '0') || (negative && int_len == 1 && *int_start == '0'))
        *not_columns = true;
    if (comma_not_thousands(int_start, frac - 1, frac_len))
        *not_thousands = true;
    return true;
}

/* The reading of a file whose first non-blank line [ls, le) has a ',' (see above); lines from
 * ls to end. *comma_line, *comma (may be NULL): the first line with a ',' (0 for ls's, counting
 * blank lines) and where it starts. */
static enum comma_reading comma_file(const char *ls, const char *end, size_t *comma_line,
                                     const char **comma)
{
    bool not_columns = false, not_thousands = false, seen = false;
    const char *p = ls;
    for (size_t line = 0; p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *s = p, *e = nl ? nl : end;
        p = nl ? nl + 1 : end;
        trim_line(&s, &e);
        if (s == e)
            continue; /* blank */
        if (!comma_number(s, e, &not_columns, &not_thousands))
            return COMMA_COLUMNS;
        if (!seen && comma_line && memchr(s, ',', (size_t)(e - s))) {
            seen = true;
            *comma_line = line;
            *comma = s;
        }
    }
    if (!not_columns)
        return COMMA_COLUMNS;
    return not_thousands ? COMMA_DECIMAL : COMMA_AMBIGUOUS;
}

/* The first non-blank line [*ls, *le) of buf (after a byte order mark); false if none. */
static bool first_line(const char *buf, size_t len, const char **ls, const char **le)
{
    const char *p = buf, *end = buf + len, *next;
    if (len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
        p += 3;
    while (p < end) {
        *ls = p;
        *le = line_end(p, end, &next);
        for (const char *s = *ls; s < *le; s++)
            if (!is_blank(*s) && *s != '\r')
                return true;
        p = next;
    }
    return false;
}

/* comma_file for the rows from ls (line number line): whether ',' is a decimal mark in them;
 * ambiguous_csv when they leave it open. */
static enum ecg_status comma_rows(const struct csv_state *st, const char *ls, size_t line,
                                  bool *mark, struct ecg_error *err)
{
    size_t comma_line = 0;
    const char *comma = ls;
    enum comma_reading reading = comma_file(ls, st->end, &comma_line, &comma);
    *mark = reading == COMMA_DECIMAL;
    if (reading != COMMA_AMBIGUOUS)
        return ECG_OK;
    char q[4 * READ_QUOTE_MAX + 8];
    const char *cs = comma, *ce = memchr(comma, '\n', (size_t)(st->end - comma));
    ce = ce ? ce : st->end;
    trim_line(&cs, &ce);
    read_quote(q, sizeof q, cs, (size_t)(ce - cs));
    return ecg_fail(err, ECG_ERR_FORMAT, "ambiguous_csv",
                    "line %zu (\"%s\"): every line holds one number, and its ',' may be a "
                    "decimal mark or a thousands separator: write the numbers with '.' as "
                    "their decimal mark and no separator",
                    line + comma_line, q);
}

bool read_csv_decimal_comma_likely(const char *buf, size_t len)
{
    const char *ls, *le;
    if (!first_line(buf, len, &ls, &le) || read_csv_delimiter(ls, le) != ',')
        return false;
    trim_line(&ls, &le);
    bool not_columns = false, not_thousands = false;
    return comma_number(ls, le, &not_columns, &not_thousands);
}

/*
 * Tab-separated files (as spreadsheets also export them) read a ',' in a number as its decimal
 * mark, as ';' files do; but a tab file may come from a locale whose ',' groups thousands. So
 * each number [fs, fe) read with a decimal comma at comma is checked: a part before it that is
 * 0 ("-0,02") or a part after it of other than three digits ("1,5") rules a thousands separator
 * out; a file whose numbers never do ("1,024", "2,048") is refused (ambiguous_csv).
 */
static void tab_comma(struct csv_state *st, const char *fs, const char *comma, const char *fe)
{
    const char *i = fs;
    if (i < comma && (*i == '-' || *i == '+'))
        i++;
    const char *d = comma + 1;
    while (d < fe && (unsigned char)(*d - '0') < 10)
        d++;
    if (comma_not_thousands(i, comma, (size_t)(d - (comma + 1))))
        st->comma_not_thousands = true;
    if (!st->comma_line) {
        st->comma_line = st->line;
        read_quote(st->comma_text, sizeof st->comma_text, fs, (size_t)(fe - fs));
    }
}

/* Counts the fields of a line. */
static size_t count_fields(const struct csv_state *st, const char *ls, const char *le)
{
    if (!st->delim)
        return 1;
    size_t n = 1;
    for (const char *p = ls; (p = memchr(p, st->delim, (size_t)(le - p))) != NULL; p++)
        n++;
    return n;
}

enum ecg_status read_csv_column(const char *buf, size_t len, const struct ecg_read_opts *opts,
                                struct ecg_signal *out, struct ecg_error *err)
{
    enum ecg_status status = ECG_OK;
    struct sample_buf sb = {.max = opts->max_samples};
    struct csv_state st = {.begin = buf, .end = buf + len, .line = 1};
    const char *p = buf;
    double fs_hz = 0;

    if (len == 0)
        return ecg_fail(err, ECG_ERR_FORMAT, "empty_input", "CSV input is empty");
    status = read_rate_from_opts(opts, "CSV", &fs_hz, err);
    if (status != ECG_OK)
        return status;
    if (len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
        p += 3;

    /* First non-blank line: delimiter, header, column choice. */
    const char *next = p, *ls = p, *le = p;
    for (;;) {
        if (p >= st.end) {
            status = ecg_fail(err, ECG_ERR_FORMAT, "empty_input", "CSV holds no data rows");
            goto out;
        }
        ls = p;
        le = line_end(p, st.end, &next);
        const char *s = ls;
        while (s < le && (is_blank(*s) || *s == '\r'))
            s++;
        if (s < le)
            break;
        p = next;
        st.line++;
    }
    status = check_text(&st, ls, le, err);
    if (status != ECG_OK)
        goto out;
    st.delim = read_csv_delimiter(ls, le);

    long index;
    const char *name = read_lead_index(opts->lead, &index) ? NULL : opts->lead;
    st.comma_mark = st.delim == ';' || st.delim == '\t';
    if (st.delim == ',') { /* one column with decimal commas? (see comma_file) */
        status = comma_rows(&st, ls, st.line, &st.comma_mark, err);
        if (status != ECG_OK)
            goto out;
        if (st.comma_mark)
            st.delim = 0; /* one column: its commas are decimal marks */
        st.comma_seen = true;
    }
    size_t column = name ? 0 : (size_t)index;
    /* A header row: for a lead chosen by name, any field that looks like a name; for an index,
     * the chosen field itself (so that "0.5,N" with a text column is still data). */
    bool header = false;
    {
        const char *q = ls;
        for (size_t col = 0;; col++) {
            const char *fe = field_end(&st, q, le), *s = q, *e = fe;
            trim_field(&st, &s, &e);
            if ((name || col == column) && looks_like_name(s, e))
                header = true;
            if (fe == le)
                break;
            q = fe + 1;
        }
    }
    if (header) {
        status = header_select(&st, ls, le, name, index, &column, out, err);
        if (status != ECG_OK)
            goto out;
        p = next;
        st.line++;
    } else if (name) {
        char q[4 * READ_QUOTE_MAX + 8];
        read_quote(q, sizeof q, name, strlen(name));
        status = ecg_fail(err, ECG_ERR_NOT_FOUND, "lead_not_found",
                          "CSV has no header row, so there is no column named \"%s\": give a "
                          "0-based column index",
                          q);
        goto out;
    } else {
        size_t fields = count_fields(&st, ls, le);
        if (index < 0 || (size_t)index >= fields) {
            status = ecg_fail(err, ECG_ERR_NOT_FOUND, "lead_not_found",
                              "column %ld does not exist: line %zu has %zu column%s", index,
                              st.line, fields, fields == 1 ? "" : "s");
            goto out;
        }
    }

    /* Data rows. */
    const char *const data = p;
    const size_t data_line = st.line;
    size_t short_skip = 0, short_retry = SHORT_RETRY_MIN;
    while (p < st.end) {
        ls = p;
        const char *fs = p;
        if (column == 0) {
            /* Where short_lines takes no line, the file's numbers are likely long: it is spared
             * the next short_retry lines, twice as many each time it is wrong again (speed
             * only: both paths read a line alike). */
            if (short_skip == 0) {
                size_t line_before = st.line;
                status = short_lines(&st, &p, &sb, err);
                if (status != ECG_OK)
                    goto out;
                if (p >= st.end)
                    break;
                ls = fs = p;
                if (st.line == line_before) {
                    short_skip = short_retry;
                    short_retry = short_retry < SHORT_RETRY_MAX ? 2 * short_retry : short_retry;
                } else {
                    short_retry = SHORT_RETRY_MIN;
                }
            } else {
                short_skip--;
            }
            /* Fast path: a number right at the line start, then the line end or a delimiter. */
            float v;
            const char *q = starts_number(*p) ? ecg_parse_float(p, st.end, &v) : p;
            bool line_ends =
                q < st.end && (*q == '\n' || (*q == '\r' && q + 1 < st.end && q[1] == '\n'));
            if (q != p && line_ends) {
                if (!isfinite(v)) {
                    status = out_of_range(&st, column, p, err);
                    goto out;
                }
                status = push(&sb, v, err);
                if (status != ECG_OK)
                    goto out;
                p = q + 1 + (*q == '\r');
                st.line++;
                continue;
            }
        }
        /* General path: find the selected field in the line. */
        le = line_end(p, st.end, &next);
        {
            const char *s = ls;
            while (s < le && (is_blank(*s) || *s == '\r'))
                s++;
            if (s == le) { /* blank line */
                p = next;
                st.line++;
                continue;
            }
        }
        status = check_text(&st, ls, le, err);
        if (status != ECG_OK)
            goto out;
        fs = ls;
        for (size_t col = 0; col < column; col++) {
            const char *d = st.delim ? memchr(fs, st.delim, (size_t)(le - fs)) : NULL;
            if (!d) {
                status = ecg_fail(err, ECG_ERR_FORMAT, "ragged_csv",
                                  "line %zu: missing column %zu (the line has %zu)", st.line,
                                  column + 1, col + 1);
                goto out;
            }
            fs = d + 1;
        }
        const char *fe = field_end(&st, fs, le);
        trim_field(&st, &fs, &fe);
        float v = 0;
        const char *q = (fs < fe) ? ecg_parse_float(fs, fe, &v) : fs;
        if (!st.delim && !st.comma_seen && q != fe && q > fs && *q == ',') {
            /* the first ',' in a number of a one-column file (its first line, header or data,
             * has no delimiter): a decimal mark in every row, or refused (comma_file) */
            st.comma_seen = true;
            status = comma_rows(&st, data, data_line, &st.comma_mark, err);
            if (status != ECG_OK)
                goto out;
        }
        if (st.comma_mark && q != fe && q > fs && *q == ',') {
            /* a decimal comma: the number again with '.', from a copy of the field */
            char number[64];
            size_t n = (size_t)(fe - fs);
            if (n < sizeof number && !memchr(fs, '.', n)) {
                const char *comma = q;
                memcpy(number, fs, n);
                number[q - fs] = '.';
                const char *r = ecg_parse_float(number, number + n, &v);
                q = r == number + n ? fe : fs + (r - number);
                if (q == fe && st.delim == '\t')
                    tab_comma(&st, fs, comma, fe);
                st.comma_read = st.comma_read || q == fe;
            }
        }
        if (q == fs || q != fe) {
            status = bad_value(&st, column, fs, fe, err);
            goto out;
        }
        if (!isfinite(v)) {
            status = out_of_range(&st, column, fs, err);
            goto out;
        }
        status = push(&sb, v, err);
        if (status != ECG_OK)
            goto out;
        p = next;
        st.line++;
    }
    if (sb.n == 0) {
        status = ecg_fail(err, ECG_ERR_FORMAT, "empty_input", "CSV holds no data rows");
        goto out;
    }
    if (st.comma_line && !st.comma_not_thousands) { /* see tab_comma */
        status = ecg_fail(err, ECG_ERR_FORMAT, "ambiguous_csv",
                          "line %zu, column %zu (\"%s\"): no number of the column shows "
                          "whether its ',' is a decimal mark or a thousands separator: write "
                          "the numbers with '.' as their decimal mark and no separator",
                          st.comma_line, column + 1, st.comma_text);
        goto out;
    }
    out->samples = sb.v;
    out->n = sb.n;
    out->fs_hz = fs_hz;
    out->decimal_comma = st.comma_read;
    sb.v = NULL;
out:
    sample_buf_fini(&sb);
    if (status != ECG_OK)
        memset(out, 0, sizeof *out);
    return status;
}
