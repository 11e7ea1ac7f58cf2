/* Direct reader for the integer columns of an SQLite rowid table (nsys' big event tables).
 *
 * SQLite's own row loop (sqlite3_step + one sqlite3_column_* call per value, then the ADBC driver's
 * Arrow builders) costs about 1.5 us per kernel row; the data itself is a few varints per row. This
 * module walks the table's b-tree pages straight from the file (pread on a read-only descriptor: the
 * trace is never mapped writable, never locked, never written) and decodes the wanted fields of each
 * record into int64 columns, with the GIL released.
 *
 * It handles exactly the common case and refuses everything else with `Unsupported`, so the caller
 * reads that table through SQLite instead:
 *   - a value that is not an integer or NULL in a wanted column (REAL, TEXT, BLOB),
 *   - a record that spills to overflow pages,
 *   - a b-tree page that is not a table page (WITHOUT ROWID tables, damaged files).
 * A page number outside the file, a loop in the b-tree, or a cell that points outside its page is
 * reported as `Unsupported` too: SQLite then reads the file and reports the damage in its own words.
 *
 * File format: https://www.sqlite.org/fileformat2.html (b-tree pages, cells, record format, varints).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static PyObject *Unsupported;

#define MAX_DEPTH 64

typedef struct {
    int fd;
    uint32_t page_size;   /* bytes per page */
    uint32_t usable;      /* page_size - reserved bytes */
    uint64_t n_pages;     /* pages in the file */
    const char *err;      /* first problem found (static string) */
    uint32_t err_page;
} Reader;

static inline uint32_t be16(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* SQLite varint: 1-9 bytes, big-endian 7-bit groups, the 9th byte contributes 8 bits.
 * Returns the number of bytes read, 0 if it runs past `end`. */
static inline int varint(const uint8_t *p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        if (p + i >= end) return 0;
        v = (v << 7) | (p[i] & 0x7f);
        if (!(p[i] & 0x80)) { *out = v; return i + 1; }
    }
    if (p + 8 >= end) return 0;
    *out = (v << 8) | p[8];
    return 9;
}

/* The first `len` bytes of page `pgno` (the whole page: read_page). */
static int read_head(Reader *r, uint32_t pgno, uint8_t *buf, size_t len) {
    if (pgno < 1 || pgno > r->n_pages) { r->err = "page number outside the file"; r->err_page = pgno; return -1; }
    off_t off = (off_t)(pgno - 1) * r->page_size;
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(r->fd, buf + got, len - got, off + (off_t)got);
        if (n < 0) { if (errno == EINTR) continue; r->err = "read error"; r->err_page = pgno; return -1; }
        if (n == 0) { r->err = "file shorter than its pages"; r->err_page = pgno; return -1; }
        got += (size_t)n;
    }
    return 0;
}

static int read_page(Reader *r, uint32_t pgno, uint8_t *buf) { return read_head(r, pgno, buf, r->page_size); }

/* Leaf pages of the table b-tree rooted at `root`, in rowid order, as (page number, cell count)
 * pairs. Returns a malloc'd array of 2 * count values. */
static uint32_t *collect_leaves(Reader *r, uint32_t root, size_t *count) {
    size_t cap = 1024, n = 0;
    uint32_t *out = malloc(2 * cap * sizeof(uint32_t));  /* (page, cells) pairs */
    uint8_t *page = malloc(r->page_size);
    /* explicit stack of (interior page copy, next cell index) */
    uint8_t *stack_pages = malloc((size_t)MAX_DEPTH * r->page_size);
    int stack_next[MAX_DEPTH];
    uint32_t stack_pgno[MAX_DEPTH];
    int depth = 0;
    uint64_t visited = 0;
    if (!out || !page || !stack_pages) { r->err = "out of memory"; goto fail; }

    uint32_t pgno = root;
    for (;;) {
        /* descend from pgno */
        if (++visited > r->n_pages) { r->err = "b-tree loop"; r->err_page = pgno; goto fail; }
        uint32_t hdr = pgno == 1 ? 100 : 0;
        /* a leaf's cell count is in its 8-byte header: the rest of the page is read when decoded */
        if (read_head(r, pgno, page, hdr + 12) < 0) goto fail;
        uint8_t kind = page[hdr];
        if (kind == 0x05 && read_page(r, pgno, page) < 0) goto fail;
        if (kind == 0x0D) {
            if (n == cap) {
                cap *= 2;
                uint32_t *grown = realloc(out, 2 * cap * sizeof(uint32_t));
                if (!grown) { r->err = "out of memory"; goto fail; }
                out = grown;
            }
            out[2 * n] = pgno;
            out[2 * n + 1] = be16(page + hdr + 3);
            n++;
        } else if (kind == 0x05) {
            if (depth == MAX_DEPTH) { r->err = "b-tree too deep"; r->err_page = pgno; goto fail; }
            memcpy(stack_pages + (size_t)depth * r->page_size, page, r->page_size);
            stack_next[depth] = 0;
            stack_pgno[depth] = pgno;
            depth++;
        } else {
            r->err = "not a table b-tree page"; r->err_page = pgno; goto fail;
        }
        /* next child: pop finished interior pages */
        for (;;) {
            if (depth == 0) goto done;
            uint8_t *ip = stack_pages + (size_t)(depth - 1) * r->page_size;
            uint32_t ih = stack_pgno[depth - 1] == 1 ? 100 : 0;
            uint32_t ncells = be16(ip + ih + 3);
            int i = stack_next[depth - 1]++;
            if ((uint32_t)i < ncells) {
                uint32_t ptr_at = ih + 12 + 2 * (uint32_t)i;
                if (ptr_at + 2 > r->usable) { r->err = "cell pointer outside the page"; r->err_page = stack_pgno[depth - 1]; goto fail; }
                uint32_t cell = be16(ip + ptr_at);
                if (cell + 4 > r->usable) { r->err = "cell outside the page"; r->err_page = stack_pgno[depth - 1]; goto fail; }
                pgno = be32(ip + cell);
                break;
            }
            if ((uint32_t)i == ncells) { pgno = be32(ip + ih + 8); break; }
            depth--;
        }
    }
done:
    free(page);
    free(stack_pages);
    *count = n;
    return out;
fail:
    free(out);
    free(page);
    free(stack_pages);
    return NULL;
}

typedef struct {
    Reader r;
    const uint32_t *leaves;
    size_t n_leaves;
    int n_fields;          /* highest wanted record field + 1 */
    const int *field_out;  /* per record field: output column or -1 */
    int rowid_out;         /* output column that takes the rowid, or -1 */
    const int *unmapped;   /* output columns neither a field nor the rowid fills (NULL in every row) */
    int n_unmapped;
    int n_out;
    char **data;           /* per output column: int64 or int32 values (width) */
    const int *width;      /* 8 or 4 bytes a value */
    uint8_t *overflow;     /* per output column: 1 once a value did not fit its int32 column */
    uint8_t **valid;       /* 1 = value present, 0 = NULL */
    size_t n_rows;         /* rows written */
    size_t capacity;
    int unsupported;       /* 1: a value type or layout this reader does not handle */
} Job;

/* body bytes of serial types 0-11 (10 and 11 are reserved) */
static const uint8_t SERIAL_SIZE[12] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0};

/* a value into its column: an int32 column takes the low 32 bits and notes a value that did not fit
 * (the caller then decodes that column again into int64) */
static inline void put(Job *j, int o, size_t row, int64_t v) {
    if (j->width[o] == 8) {
        ((int64_t *)j->data[o])[row] = v;
    } else {
        int32_t w = (int32_t)(uint32_t)(uint64_t)v;
        ((int32_t *)j->data[o])[row] = w;
        if ((int64_t)w != v) j->overflow[o] = 1;
    }
}

/* a NULL: value 0, not valid */
static inline void put_null(Job *j, int o, size_t row) {
    j->valid[o][row] = 0;
    put(j, o, row, 0);
}

/* One leaf page's cells into the columns from row *row_at on. */
static int decode_page(Job *j, uint32_t pgno, const uint8_t *page, size_t *row_at) {
    Reader *r = &j->r;
    const uint32_t max_local = r->usable - 35;
    size_t row = *row_at;
    uint32_t hdr = pgno == 1 ? 100 : 0;
    if (page[hdr] != 0x0D) { r->err = "not a table leaf page"; r->err_page = pgno; goto fail; }
    uint32_t ncells = be16(page + hdr + 3);
    const uint8_t *end = page + r->usable;
    for (uint32_t c = 0; c < ncells; c++) {
        uint32_t ptr_at = hdr + 8 + 2 * c;
        if (ptr_at + 2 > r->usable) { r->err = "cell pointer outside the page"; r->err_page = pgno; goto fail; }
        uint32_t cell = be16(page + ptr_at);
        if (cell >= r->usable) { r->err = "cell outside the page"; r->err_page = pgno; goto fail; }
        const uint8_t *p = page + cell;
        uint64_t payload, rowid, hsize;
        int k = varint(p, end, &payload);
        if (!k) { r->err = "cell outside the page"; r->err_page = pgno; goto fail; }
        p += k;
        k = varint(p, end, &rowid);
        if (!k) { r->err = "cell outside the page"; r->err_page = pgno; goto fail; }
        p += k;
        if (payload > max_local) { j->unsupported = 1; r->err = "record spills to overflow pages"; goto fail; }
        if (p + payload > end) { r->err = "record outside the page"; r->err_page = pgno; goto fail; }
        const uint8_t *rec_end = p + payload;
        k = varint(p, rec_end, &hsize);
        if (!k || hsize > payload) { r->err = "bad record header"; r->err_page = pgno; goto fail; }
        const uint8_t *hp = p + k, *hend = p + hsize, *body = p + hsize;
        if (row >= j->capacity) { r->err = "more cells than counted"; r->err_page = pgno; goto fail; }
        int f = 0;
        for (; f < j->n_fields && hp < hend; f++) {
            uint64_t st;
            if (*hp < 0x80) {
                st = *hp++;  /* nearly every serial type is one byte */
            } else {
                k = varint(hp, hend, &st);
                if (!k) { r->err = "bad record header"; r->err_page = pgno; goto fail; }
                hp += k;
            }
            uint64_t size;
            if (st < 12) {
                if (st == 10 || st == 11) { r->err = "reserved serial type"; r->err_page = pgno; goto fail; }
                size = SERIAL_SIZE[st];
            } else {
                size = (st - 12) / 2;
            }
            if (body + size > rec_end) { r->err = "record body outside the record"; r->err_page = pgno; goto fail; }
            int o = j->field_out[f];
            if (o >= 0) {
                int64_t v;
                uint8_t present = 1;
                switch (st) {  /* big-endian two's complement of 1, 2, 3, 4, 6 or 8 bytes */
                case 0: v = 0; present = 0; break;  /* NULL */
                case 1: v = (int8_t)body[0]; break;
                case 2: v = (int16_t)be16(body); break;
                case 3: v = (int32_t)(((uint32_t)body[0] << 24) | ((uint32_t)body[1] << 16) | ((uint32_t)body[2] << 8)) >> 8; break;
                case 4: v = (int32_t)be32(body); break;
                case 5: v = (int64_t)((((uint64_t)be16(body) << 32) | be32(body + 2)) << 16) >> 16; break;
                case 6: v = (int64_t)(((uint64_t)be32(body) << 32) | be32(body + 4)); break;
                case 8: v = 0; break;
                case 9: v = 1; break;
                default:  /* REAL, TEXT or BLOB: not for this reader */
                    j->unsupported = 1;
                    r->err = "a value that is not an integer";
                    goto fail;
                }
                j->valid[o][row] = present;
                put(j, o, row, v);
            }
            body += size;
        }
        /* a record shorter than the schema (columns added later), and the columns no field fills:
         * NULL */
        for (; f < j->n_fields; f++)
            if (j->field_out[f] >= 0) put_null(j, j->field_out[f], row);
        for (int u = 0; u < j->n_unmapped; u++) put_null(j, j->unmapped[u], row);
        if (j->rowid_out >= 0) {
            put(j, j->rowid_out, row, (int64_t)rowid);
            j->valid[j->rowid_out][row] = 1;
        }
        row++;
    }
    *row_at = row;
    return 0;
fail:
    return -1;
}

/* Leaves that follow each other in the file (as nsys writes its tables) are read together, up to
 * READ_RUN pages a pread: a 245 MB trace's 60,000 leaves in about 2,000 reads instead of one read
 * a page. A run that cannot be read whole is read again a page at a time, so an error names its page. */
#define READ_RUN 32
static int decode_leaves(Job *j) {
    Reader *r = &j->r;
    uint8_t *buf = malloc((size_t)r->page_size * READ_RUN);
    if (!buf) { r->err = "out of memory"; return -1; }
    size_t row = 0, li = 0;
    while (li < j->n_leaves) {
        uint32_t first = j->leaves[2 * li];
        size_t run = 1;
        while (run < READ_RUN && li + run < j->n_leaves && j->leaves[2 * (li + run)] == first + run) run++;
        int whole = run > 1 && first >= 1 && (uint64_t)first + run - 1 <= r->n_pages
                    && read_head(r, first, buf, (size_t)r->page_size * run) == 0;
        if (!whole) { r->err = NULL; r->err_page = 0; }
        for (size_t k = 0; k < run; k++) {
            uint8_t *page = buf + (whole ? k * (size_t)r->page_size : 0);
            if (!whole && read_page(r, first + (uint32_t)k, page) < 0) goto fail;
            if (decode_page(j, first + (uint32_t)k, page, &row) < 0) goto fail;
        }
        li += run;
    }
    free(buf);
    j->n_rows = row;
    return 0;
fail:
    free(buf);
    return -1;
}

static int reader_init(Reader *r, int fd, Py_ssize_t page_size, Py_ssize_t reserved, Py_ssize_t file_size) {
    if (page_size < 512 || page_size > 65536 || (page_size & (page_size - 1)) || reserved < 0 || reserved > 255
        || page_size - reserved < 480) {
        PyErr_SetString(Unsupported, "unexpected page size");
        return -1;
    }
    r->fd = fd;
    r->page_size = (uint32_t)page_size;
    r->usable = (uint32_t)(page_size - reserved);
    r->n_pages = (uint64_t)file_size / (uint64_t)page_size;
    r->err = NULL;
    r->err_page = 0;
    return 0;
}

static PyObject *raise_reader(Reader *r) {
    if (r->err_page)
        PyErr_Format(Unsupported, "%s (page %u)", r->err, r->err_page);
    else
        PyErr_SetString(Unsupported, r->err ? r->err : "unreadable b-tree");
    return NULL;
}

/* leaves(fd, page_size, reserved, file_size, root) -> bytes of native uint32 (page, cells) pairs */
static PyObject *py_leaves(PyObject *self, PyObject *args) {
    (void)self;
    int fd;
    Py_ssize_t page_size, reserved, file_size, root;
    if (!PyArg_ParseTuple(args, "innnn", &fd, &page_size, &reserved, &file_size, &root)) return NULL;
    Reader r;
    if (reader_init(&r, fd, page_size, reserved, file_size) < 0) return NULL;
    if (root < 1 || (uint64_t)root > r.n_pages) { PyErr_SetString(Unsupported, "root page outside the file"); return NULL; }
    size_t n = 0;
    uint32_t *leaves;
    Py_BEGIN_ALLOW_THREADS
    leaves = collect_leaves(&r, (uint32_t)root, &n);
    Py_END_ALLOW_THREADS
    if (!leaves) return raise_reader(&r);
    PyObject *out = PyBytes_FromStringAndSize((const char *)leaves, (Py_ssize_t)(2 * n * sizeof(uint32_t)));
    free(leaves);
    return out;
}

/* decode(fd, page_size, reserved, file_size, leaves, fields, rowid_out, outputs[, overflow]) -> rows
 *   leaves: a slice of what leaves() returned (its cell counts are the rows it holds)
 *   fields: tuple, per record field index, of the output column it fills (-1: skip)
 *   outputs: list, per output column, of a (data, valid) pair of writable buffers: int64 (or int32)
 *            and uint8, each exactly as long as the leaves' cell count (slices of the caller's
 *            whole-table arrays, so parts decoded on several threads need no concatenation)
 *   overflow: a writable buffer of one byte per output column, needed when a data buffer is int32
 *            (4 bytes a row): its byte is set to 1 when a value of that column does not fit in
 *            int32 (the column then holds the low 32 bits; the caller decodes it again in int64).
 *            Only ever set, never cleared: parts decoded on several threads may share it. */
static PyObject *py_decode(PyObject *self, PyObject *args) {
    (void)self;
    int fd, rowid_out;
    Py_ssize_t page_size, reserved, file_size;
    Py_buffer leaves_buf;
    PyObject *fields, *outputs, *overflow_obj = NULL;
    if (!PyArg_ParseTuple(args, "innny*O!iO!|O", &fd, &page_size, &reserved, &file_size, &leaves_buf,
                          &PyTuple_Type, &fields, &rowid_out, &PyList_Type, &outputs, &overflow_obj))
        return NULL;
    PyObject *result = NULL;
    int *field_out = NULL;
    int *width = NULL;
    uint8_t *overflow = NULL, *filled = NULL;
    int *unmapped = NULL, n_unmapped = 0;
    Py_buffer overflow_buf;
    int have_overflow = 0, any_narrow = 0;
    char **data = NULL;
    uint8_t **valid = NULL;
    Py_buffer *views = NULL;
    int n_views = 0;
    Job j;
    memset(&j, 0, sizeof j);
    Py_ssize_t n_out = PyList_GET_SIZE(outputs);
    Py_ssize_t n_fields = PyTuple_GET_SIZE(fields);
    size_t n_leaves = (size_t)leaves_buf.len / (2 * sizeof(uint32_t));
    size_t capacity = 0;
    for (size_t i = 0; i < n_leaves; i++) capacity += ((const uint32_t *)leaves_buf.buf)[2 * i + 1];
    if (reader_init(&j.r, fd, page_size, reserved, file_size) < 0) goto out;
    if (n_out > 4096 || rowid_out >= n_out) { PyErr_SetString(PyExc_ValueError, "bad column count"); goto out; }
    field_out = malloc(sizeof(int) * (size_t)(n_fields ? n_fields : 1));
    data = calloc((size_t)(n_out ? n_out : 1), sizeof *data);
    valid = calloc((size_t)(n_out ? n_out : 1), sizeof *valid);
    views = calloc((size_t)(2 * n_out + 1), sizeof *views);
    width = calloc((size_t)(n_out ? n_out : 1), sizeof *width);
    overflow = calloc((size_t)(n_out ? n_out : 1), 1);
    filled = calloc((size_t)(n_out ? n_out : 1), 1);
    unmapped = calloc((size_t)(n_out ? n_out : 1), sizeof *unmapped);
    if (!field_out || !data || !valid || !views || !width || !overflow || !filled || !unmapped) { PyErr_NoMemory(); goto out; }
    if (overflow_obj != NULL && overflow_obj != Py_None) {
        if (PyObject_GetBuffer(overflow_obj, &overflow_buf, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto out;
        have_overflow = 1;
        if (overflow_buf.len != n_out) { PyErr_SetString(PyExc_ValueError, "overflow: one byte per output column"); goto out; }
    }
    for (Py_ssize_t i = 0; i < n_fields; i++) {
        long v = PyLong_AsLong(PyTuple_GET_ITEM(fields, i));
        if (v == -1 && PyErr_Occurred()) goto out;
        if (v >= n_out || v < -1) { PyErr_SetString(PyExc_ValueError, "bad output column"); goto out; }
        if (v >= 0 && (filled[v] || v == rowid_out)) { PyErr_SetString(PyExc_ValueError, "an output column filled twice"); goto out; }
        if (v >= 0) filled[v] = 1;
        field_out[i] = (int)v;
    }
    for (Py_ssize_t o = 0; o < n_out; o++)
        if (!filled[o] && o != rowid_out) unmapped[n_unmapped++] = (int)o;
    for (Py_ssize_t o = 0; o < n_out; o++) {
        PyObject *pair = PyList_GET_ITEM(outputs, o);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) { PyErr_SetString(PyExc_TypeError, "outputs: (data, valid) pairs"); goto out; }
        for (int k = 0; k < 2; k++) {
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(pair, k), &views[n_views], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto out;
            n_views++;
        }
        size_t dlen = (size_t)views[n_views - 2].len;
        if ((dlen != capacity * sizeof(int64_t) && dlen != capacity * sizeof(int32_t)) || (size_t)views[n_views - 1].len != capacity) {
            PyErr_SetString(PyExc_ValueError, "output buffer size does not match the leaves' cell count");
            goto out;
        }
        width[o] = dlen == capacity * sizeof(int64_t) ? 8 : 4;  /* no rows: either; int64 */
        if (width[o] == 4) any_narrow = 1;
        data[o] = (char *)views[n_views - 2].buf;
        valid[o] = (uint8_t *)views[n_views - 1].buf;
    }
    j.leaves = (const uint32_t *)leaves_buf.buf;
    j.n_leaves = n_leaves;
    j.n_fields = (int)n_fields;
    j.field_out = field_out;
    j.rowid_out = rowid_out;
    j.unmapped = unmapped;
    j.n_unmapped = n_unmapped;
    j.n_out = (int)n_out;
    if (any_narrow && !have_overflow) { PyErr_SetString(PyExc_ValueError, "int32 outputs need an overflow buffer"); goto out; }
    j.data = data;
    j.width = width;
    j.overflow = overflow;
    j.valid = valid;
    j.capacity = capacity;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = decode_leaves(&j);
    Py_END_ALLOW_THREADS
    if (rc < 0) { raise_reader(&j.r); goto out; }
    if (j.n_rows != capacity) { PyErr_SetString(Unsupported, "fewer rows than cells"); goto out; }
    if (have_overflow)
        for (Py_ssize_t o = 0; o < n_out; o++)
            if (overflow[o]) ((uint8_t *)overflow_buf.buf)[o] = 1;
    result = PyLong_FromSize_t(j.n_rows);
out:
    if (have_overflow) PyBuffer_Release(&overflow_buf);
    free(width);
    free(overflow);
    free(filled);
    free(unmapped);
    for (int v = 0; v < n_views; v++) PyBuffer_Release(&views[v]);
    PyBuffer_Release(&leaves_buf);
    free(views);
    free(data);
    free(valid);
    free(field_out);
    return result;
}

/* varints(columns) -> bytes: unsigned LEB128 (7 bits a byte, low first, high bit = more follows) of
 * every value of each column in turn, the columns' encodings concatenated. Not the b-tree reader's
 * own business: the report's timeline (nsysan/report/timeline.py, ``varint``) ships millions of ops
 * this way, and numpy needs a pass and a temporary per output byte position. Each column: a
 * C-contiguous buffer of 8-byte integers; a negative value raises ValueError. */
static int varint_len(int64_t v) {
    uint64_t u = (uint64_t)v;
    int n = 1;
    while (u >= 0x80) { u >>= 7; n++; }
    return n;
}

/* Take a C-contiguous int64 buffer of ``obj`` into ``view``: 0 ok; -1 no buffer (nothing to
   release); -2 not int64 (the view is taken: release it). ``who`` names the caller in the error. */
static int int64_buffer(PyObject *obj, Py_buffer *view, const char *who, int writable) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (view->itemsize != 8 || (strcmp(f, "q") != 0 && strcmp(f, "l") != 0)) {
        PyErr_Format(PyExc_TypeError, "%s: columns must be int64", who);
        return -2;
    }
    return 0;
}

static int int64_view(PyObject *obj, Py_buffer *view, const char *who) { return int64_buffer(obj, view, who, 0); }

static PyObject *py_varints(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "O", &seq)) return NULL;
    PyObject *fast = PySequence_Fast(seq, "varints: a sequence of int64 buffers");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject *result = NULL;
    Py_buffer *views = calloc((size_t)(n ? n : 1), sizeof *views);
    Py_ssize_t got = 0;
    if (!views) { PyErr_NoMemory(); goto out; }
    for (; got < n; got++) {
        int r = int64_view(PySequence_Fast_GET_ITEM(fast, got), &views[got], "varints");
        if (r == -2) got++;
        if (r) goto out;
    }
    size_t total = 0;
    int negative = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t c = 0; c < n && !negative; c++) {
        const int64_t *v = (const int64_t *)views[c].buf;
        Py_ssize_t m = views[c].len / 8;
        for (Py_ssize_t i = 0; i < m; i++) {
            if (v[i] < 0) { negative = 1; break; }
            total += (size_t)varint_len(v[i]);
        }
    }
    Py_END_ALLOW_THREADS
    if (negative) { PyErr_SetString(PyExc_ValueError, "varint: negative value"); goto out; }
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!result) goto out;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t c = 0; c < n; c++) {
        const int64_t *v = (const int64_t *)views[c].buf;
        Py_ssize_t m = views[c].len / 8;
        for (Py_ssize_t i = 0; i < m; i++) {
            uint64_t u = (uint64_t)v[i];
            while (u >= 0x80) { *p++ = (uint8_t)((u & 0x7F) | 0x80); u >>= 7; }
            *p++ = (uint8_t)u;
        }
    }
    Py_END_ALLOW_THREADS
out:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    free(views);
    Py_DECREF(fast);
    return result;
}

/* lane(order, start, end, name, kind, depth, t0) -> (bytes, covered): one timeline lane's five varint columns
 * (start delta from the previous op, duration, name id, kind, NVTX depth), concatenated, straight
 * from the ops' columns: op k is row order[k] (row k when order is None: rows already in start
 * order); name ids and kinds int8, int32 or int64 (kind also one int for every op); times are shifted by -t0; ends are at least their
 * start; when the first start is negative every start is clamped to 0 (and every end to its start);
 * depth may be None (all 0), negative depths are 0. The same bytes as timeline.encode_ops' numpy
 * path, without its ten temporaries of the lane's length; and the length of the union of the ops'
 * (unshifted) intervals, the lane's busy time. */
typedef struct {
    const int64_t *order, *start, *end, *depth;
    const void *name, *kind;  /* int8, int32 or int64 (name_size, kind_size bytes); kind NULL: kind_const */
    Py_ssize_t name_size, kind_size;
    Py_ssize_t n, rows;
    int64_t t0, kind_const;
    int clamp;
} Lane;

static inline int64_t sized_at(const void *p, Py_ssize_t size, int64_t i) {
    switch (size) {
    case 1: return ((const int8_t *)p)[i];
    case 2: return ((const int16_t *)p)[i];
    case 4: return ((const int32_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}

static inline int64_t lane_rownum(const Lane *L, Py_ssize_t k) { return L->order ? L->order[k] : (int64_t)k; }

static inline int64_t wrap_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }

static inline void lane_row(const Lane *L, Py_ssize_t k, int64_t *s, int64_t *e) {
    int64_t r = lane_rownum(L, k);
    *s = wrap_sub(L->start[r], L->t0);
    *e = wrap_sub(L->end[r], L->t0);
    if (*e < *s) *e = *s;
    if (L->clamp) {
        if (*s < 0) *s = 0;
        if (*e < *s) *e = *s;
    }
}

static inline int64_t lane_value(const Lane *L, int col, Py_ssize_t k, int64_t *prev) {
    int64_t s, e, r = lane_rownum(L, k);
    switch (col) {
    case 0: lane_row(L, k, &s, &e); { int64_t d = wrap_sub(s, *prev); *prev = s; return d; }
    case 1: lane_row(L, k, &s, &e); return wrap_sub(e, s);
    case 2: return sized_at(L->name, L->name_size, r);
    case 3: return L->kind ? sized_at(L->kind, L->kind_size, r) : L->kind_const;
    default: { int64_t d = L->depth ? L->depth[r] : 0; return d < 0 ? 0 : d; }
    }
}

static int int_view(PyObject *obj, Py_buffer *view, const char *who);

static PyObject *py_lane(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[6];
    long long t0;
    if (!PyArg_ParseTuple(args, "OOOOOOL", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &t0)) return NULL;
    Py_buffer views[6];
    int got = 0;
    PyObject *result = NULL;
    Lane L;
    memset(&L, 0, sizeof L);
    const int64_t **dst[6] = {&L.order, &L.start, &L.end, NULL, NULL, &L.depth};
    if (objs[4] != Py_None && PyLong_Check(objs[4])) {  /* one kind for every op */
        L.kind_const = (int64_t)PyLong_AsLongLong(objs[4]);
        if (L.kind_const == -1 && PyErr_Occurred()) goto out;
    }
    for (int i = 0; i < 6; i++) {
        if ((i == 0 || i == 5) && objs[i] == Py_None) continue;
        if (i == 4 && PyLong_Check(objs[i])) continue;
        int r = (i == 3 || i == 4) ? int_view(objs[i], &views[got], "lane") : int64_view(objs[i], &views[got], "lane");
        if (r != -1) got++;
        if (r) goto out;
        Py_buffer *v = &views[got - 1];
        Py_ssize_t len = v->len / v->itemsize;
        if (i == 3) { L.name = v->buf; L.name_size = v->itemsize; }
        else if (i == 4) { L.kind = v->buf; L.kind_size = v->itemsize; }
        else *dst[i] = (const int64_t *)v->buf;
        if (i == 0) L.n = len;
        else if (i == 1) {
            L.rows = len;
            if (!L.order) L.n = len;
        }
        else if (len != L.rows) { PyErr_SetString(PyExc_ValueError, "lane: columns of different lengths"); goto out; }
    }
    L.t0 = (int64_t)t0;
    for (Py_ssize_t k = 0; L.order && k < L.n; k++) {
        if (L.order[k] < 0 || L.order[k] >= L.rows) { PyErr_SetString(PyExc_IndexError, "lane: order out of range"); goto out; }
    }
    if (L.n) {
        int64_t s = wrap_sub(L.start[lane_rownum(&L, 0)], L.t0);
        L.clamp = s < 0;
    }
    size_t total = 0;
    int negative = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int c = 0; c < 5 && !negative; c++) {
        int64_t prev = 0;
        for (Py_ssize_t k = 0; k < L.n; k++) {
            int64_t v = lane_value(&L, c, k, &prev);
            if (v < 0) { negative = 1; break; }
            total += (size_t)varint_len(v);
        }
    }
    Py_END_ALLOW_THREADS
    if (negative) { PyErr_SetString(PyExc_ValueError, "varint: negative value"); goto out; }
    PyObject *raw = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!raw) goto out;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(raw);
    uint64_t covered = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int c = 0; c < 5; c++) {
        int64_t prev = 0;
        for (Py_ssize_t k = 0; k < L.n; k++) {
            uint64_t u = (uint64_t)lane_value(&L, c, k, &prev);
            while (u >= 0x80) { *p++ = (uint8_t)((u & 0x7F) | 0x80); u >>= 7; }
            *p++ = (uint8_t)u;
        }
    }
    /* the union's length of the unshifted [start, end) in this order, as intervals.merge + sum:
     * a group opens where a start passes every earlier end; it spans to its own largest end */
    if (L.n) {
        int64_t r = lane_rownum(&L, 0), g_start = L.start[r], g_max = L.end[r], run = L.end[r];
        for (Py_ssize_t k = 1; k < L.n; k++) {
            r = lane_rownum(&L, k);
            int64_t s0 = L.start[r], e0 = L.end[r];
            if (s0 > run) {
                covered += (uint64_t)g_max - (uint64_t)g_start;
                g_start = s0;
                g_max = e0;
            } else if (e0 > g_max) {
                g_max = e0;
            }
            if (e0 > run) run = e0;
        }
        covered += (uint64_t)g_max - (uint64_t)g_start;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(NL)", raw, (long long)(int64_t)covered);
out:
    for (int i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    return result;
}

/* clipped_sums(st, en, codes, lo, hi, i0, i1, rows|None, filter) -> (win, code, ns) as int32, int32
 * and int64 bytes (codes: int8, int16, int32 or int64, each within int32):
 * for each window w in order, the calls k in [i0[w], i1[w]) (call rows[k] when rows is given; with
 * filter, only those ending after lo[w]), each clipped to [lo[w], hi[w]) and summed per name code;
 * one entry per (window, code) met, ordered by window, then code. What nsysan/_native/windows.py's
 * spans + clipped_sums compute with numpy, without their arrays of one entry per (window, call)
 * pair (several million on a launch loop's 751k gaps). */
typedef struct { int64_t code, ns; } CodeNs;

static int cmp_code(const void *a, const void *b) {
    int64_t x = ((const CodeNs *)a)->code, y = ((const CodeNs *)b)->code;
    return (x > y) - (x < y);
}

/* a growable array of 4- or 8-byte integers (size), reserved up front where the count is bounded */
typedef struct { char *p; size_t n, cap, size; } Vec;

static int vec_reserve(Vec *v, size_t cap) {
    if (cap <= v->cap) return 0;
    char *q = realloc(v->p, cap * v->size);
    if (!q) return -1;
    v->p = q;
    v->cap = cap;
    return 0;
}

static int vec_push(Vec *v, int64_t x) {
    if (v->n == v->cap && vec_reserve(v, v->cap ? 2 * v->cap : 1024) < 0) return -1;
    if (v->size == 4) ((int32_t *)v->p)[v->n++] = (int32_t)x;
    else ((int64_t *)v->p)[v->n++] = x;
    return 0;
}

/* the vector's values as bytes, its own memory freed at once (so the copies of several vectors are
 * never all alive next to all the vectors) */
static PyObject *vec_bytes(Vec *v) {
    PyObject *b = PyBytes_FromStringAndSize(v->p, (Py_ssize_t)(v->n * v->size));
    free(v->p);
    v->p = NULL;
    v->n = v->cap = 0;
    return b;
}

/* the three vectors as a tuple of bytes (each vector's memory freed as it is copied), or NULL */
static PyObject *vec_bytes3(Vec *x, Vec *y, Vec *z) {
    PyObject *result = NULL;
    PyObject *a = vec_bytes(x), *b = a ? vec_bytes(y) : NULL, *c = b ? vec_bytes(z) : NULL;
    if (a && b && c) result = PyTuple_Pack(3, a, b, c);
    Py_XDECREF(a);
    Py_XDECREF(b);
    Py_XDECREF(c);
    return result;
}

static PyObject *py_clipped_sums(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[8];
    int filter;
    if (!PyArg_ParseTuple(args, "OOOOOOOOp", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &objs[6],
                          &objs[7], &filter))
        return NULL;
    Py_buffer views[8];
    const int64_t *col[8] = {0};
    Py_ssize_t len[8] = {0};
    const void *codes = NULL;  /* name codes: int8, int16, int32 or int64 (code_size bytes) */
    Py_ssize_t code_size = 8;
    int got = 0;
    PyObject *result = NULL;
    Vec win = {0, 0, 0, 4}, code = {0, 0, 0, 4}, ns = {0, 0, 0, 8};
    CodeNs *buf = NULL;
    size_t buf_cap = 0;
    for (int i = 0; i < 8; i++) {
        if (i == 7 && objs[i] == Py_None) continue;
        int r = i == 2 ? int_view(objs[i], &views[got], "clipped_sums") : int64_view(objs[i], &views[got], "clipped_sums");
        if (r != -1) got++;
        if (r) goto out;
        Py_buffer *v = &views[got - 1];
        col[i] = (const int64_t *)v->buf;
        len[i] = v->len / v->itemsize;
        if (i == 2) { codes = v->buf; code_size = v->itemsize; }
    }
    /* st, en, codes: one per call; lo, hi, i0, i1: one per window; rows: maps range positions to calls */
    if (len[1] != len[0] || len[2] != len[0] || len[4] != len[3] || len[5] != len[3] || len[6] != len[3]) {
        PyErr_SetString(PyExc_ValueError, "clipped_sums: columns of different lengths");
        goto out;
    }
    Py_ssize_t n_calls = len[0], n_win = len[3], n_pos = col[7] ? len[7] : n_calls;
    if (n_win > INT32_MAX) { PyErr_SetString(PyExc_OverflowError, "clipped_sums: over 2^31 windows"); goto out; }
    size_t bound = 0;  /* entries are at most the calls in all ranges */
    for (Py_ssize_t w = 0; w < n_win; w++) {
        if (col[6][w] > col[5][w] && (col[5][w] < 0 || col[6][w] > n_pos)) {
            PyErr_SetString(PyExc_IndexError, "clipped_sums: range out of bounds");
            goto out;
        }
        if (col[6][w] > col[5][w]) bound += (size_t)(col[6][w] - col[5][w]);
    }
    if (col[7]) {
        for (Py_ssize_t k = 0; k < n_pos; k++)
            if (col[7][k] < 0 || col[7][k] >= n_calls) { PyErr_SetString(PyExc_IndexError, "clipped_sums: row out of bounds"); goto out; }
    }
    for (Py_ssize_t k = 0; k < n_calls; k++) {
        int64_t c = sized_at(codes, code_size, k);
        if (c < INT32_MIN || c > INT32_MAX) { PyErr_SetString(PyExc_OverflowError, "clipped_sums: a code over int32"); goto out; }
    }
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    {   /* room for every entry when the bound is near the windows' count (one call or name each: a
         * launch loop's gaps), so no doubling leaves half of the room unused */
        size_t want = bound < 2 * (size_t)n_win + 1024 ? bound : 2 * (size_t)n_win + 1024;
        if (want && (vec_reserve(&win, want) < 0 || vec_reserve(&code, want) < 0 || vec_reserve(&ns, want) < 0)) failed = 1;
    }
    for (Py_ssize_t w = 0; w < n_win && !failed; w++) {
        int64_t a = col[5][w], b = col[6][w], lo = col[3][w], hi = col[4][w];
        if (b <= a) continue;
        size_t m = 0;
        if ((size_t)(b - a) > buf_cap) {
            size_t cap = (size_t)(b - a) > 2 * buf_cap ? (size_t)(b - a) : 2 * buf_cap;
            CodeNs *q = realloc(buf, cap * sizeof *q);
            if (!q) { failed = 1; break; }
            buf = q;
            buf_cap = cap;
        }
        for (int64_t k = a; k < b; k++) {
            int64_t r = col[7] ? col[7][k] : k;
            int64_t s = col[0][r], e = col[1][r];
            if (filter && !(e > lo)) continue;
            buf[m].code = sized_at(codes, code_size, r);
            buf[m].ns = (e < hi ? e : hi) - (s > lo ? s : lo);
            m++;
        }
        if (m > 1) qsort(buf, m, sizeof *buf, cmp_code);  /* equal codes: integer sums, order free */
        for (size_t i = 0; i < m;) {
            int64_t c = buf[i].code, tot = 0;
            for (; i < m && buf[i].code == c; i++) tot += buf[i].ns;
            if (vec_push(&win, (int64_t)w) < 0 || vec_push(&code, c) < 0 || vec_push(&ns, tot) < 0) { failed = 1; break; }
        }
    }
    Py_END_ALLOW_THREADS
    if (failed) { PyErr_NoMemory(); goto out; }
    result = vec_bytes3(&win, &code, &ns);
out:
    for (int i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    free(win.p);
    free(code.p);
    free(ns.p);
    free(buf);
    return result;
}

/* search_sorted(a, v, right, out): out[i] = numpy.searchsorted(a, v[i], side) for an ascending int64
 * ``a`` (side "right" when ``right``, else "left"). Each search starts from the previous answer and
 * gallops (steps 1, 2, 4...) before the binary search, so needles that come in order (gap starts
 * against call starts) cost O(log distance) on memory read in order, instead of a full binary
 * search each; needles out of order are still answered exactly (the gallop goes backwards). */
static PyObject *py_search_sorted(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ao, *vo, *oo;
    int right;
    if (!PyArg_ParseTuple(args, "OOpO", &ao, &vo, &right, &oo)) return NULL;
    Py_buffer va, vv, vout;
    int r = int64_view(ao, &va, "search_sorted");
    if (r) { if (r == -2) PyBuffer_Release(&va); return NULL; }
    r = int64_view(vo, &vv, "search_sorted");
    if (r) { if (r == -2) PyBuffer_Release(&vv); PyBuffer_Release(&va); return NULL; }
    if (PyObject_GetBuffer(oo, &vout, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&va); PyBuffer_Release(&vv); return NULL;
    }
    const char *of = vout.format ? vout.format : "B";
    if (*of == '<' || *of == '=' || *of == '@') of++;
    if (vout.itemsize != 8 || (strcmp(of, "q") != 0 && strcmp(of, "l") != 0) || vout.len != vv.len) {
        PyErr_SetString(PyExc_ValueError, "search_sorted: out must be int64, one per needle");
        PyBuffer_Release(&va); PyBuffer_Release(&vv); PyBuffer_Release(&vout);
        return NULL;
    }
    const int64_t *a = (const int64_t *)va.buf, *v = (const int64_t *)vv.buf;
    int64_t *out = (int64_t *)vout.buf;
    Py_ssize_t n = va.len / 8, m = vv.len / 8;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t h = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        const int64_t x = v[i];
        /* P(k): a[k] > x (right) or a[k] >= x (left); false then true along a. Invariant: lo = -1 or
         * !P(lo); hi = n or P(hi); the answer is the first k with P(k), in (lo, hi]. */
        Py_ssize_t lo, hi, step = 1;
#define P(k) (right ? a[k] > x : a[k] >= x)
        if (h < n && !P(h)) {
            lo = h;
            for (;;) {
                Py_ssize_t nx = lo + step;
                if (nx >= n) { hi = n; break; }
                if (P(nx)) { hi = nx; break; }
                lo = nx;
                step <<= 1;
            }
        } else {
            hi = h;
            for (;;) {
                Py_ssize_t nx = hi - step;
                if (nx < 0) { lo = -1; break; }
                if (!P(nx)) { lo = nx; break; }
                hi = nx;
                step <<= 1;
            }
        }
        while (hi - lo > 1) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (P(mid)) hi = mid; else lo = mid;
        }
#undef P
        out[i] = (int64_t)hi;
        h = hi;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&va);
    PyBuffer_Release(&vv);
    PyBuffer_Release(&vout);
    Py_RETURN_NONE;
}

/* A C-contiguous buffer of signed integers (int8/bool, int32 or int64): 0 ok, -1 no
 * buffer, -2 another type (the view is taken: release it). */
static int int_view(PyObject *obj, Py_buffer *view, const char *who) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    int ok = (view->itemsize == 1 && (strcmp(f, "b") == 0 || strcmp(f, "?") == 0))
          || (view->itemsize == 2 && strcmp(f, "h") == 0)
          || (view->itemsize == 4 && (strcmp(f, "i") == 0 || strcmp(f, "l") == 0))
          || (view->itemsize == 8 && (strcmp(f, "q") == 0 || strcmp(f, "l") == 0));
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s: columns must be int8, int16, int32, int64 or bool", who);
        return -2;
    }
    return 0;
}

static inline int64_t int_at(const Py_buffer *v, Py_ssize_t i) {
    switch (v->itemsize) {
    case 1: return ((const int8_t *)v->buf)[i];  /* int8, or bool (0/1) */
    case 2: return ((const int16_t *)v->buf)[i];
    case 4: return ((const int32_t *)v->buf)[i];
    default: return ((const int64_t *)v->buf)[i];
    }
}

/* window_best(win, src, code, ns, span, sync_code, share) -> (best int64 bytes, sync uint8 bytes): for
 * the entries of nsysan/analyses/gaps.py's ``ThreadActivity.exclusive_sums`` (grouped by window, ascending),
 * per window w < len(span): ``sync`` = the time of the source-0 entries whose code is a
 * synchronization call (``sync_code[code]``, code -1 at the table's last slot), summed in entry order
 * as doubles, times 2 > span; ``best`` = the entry with the most ns of source 0 if that is over half
 * the span, else of source 1 likewise, else of any source if at least ``share`` of the span, else -1
 * (ties: the first entry). What ``explain_gaps``' numpy path computes, without its per-entry masks. */
static PyObject *py_window_best(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[6];
    double share;
    if (!PyArg_ParseTuple(args, "OOOOOOd", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &share))
        return NULL;
    Py_buffer v[6];
    int got = 0;
    PyObject *result = NULL;
    int64_t *best = NULL;
    uint8_t *sync = NULL;
    for (int i = 0; i < 6; i++) {
        int r = int_view(objs[i], &v[got], "window_best");
        if (r != -1) got++;
        if (r) goto out;
    }
    Py_ssize_t n = v[0].len / v[0].itemsize, n_win = v[4].len / v[4].itemsize;
    Py_ssize_t n_sync = v[5].len / v[5].itemsize;
    if (v[1].len / v[1].itemsize != n || v[2].len / v[2].itemsize != n || v[3].len / v[3].itemsize != n
        || v[3].itemsize != 8 || v[4].itemsize != 8 || n_sync < 1) {
        PyErr_SetString(PyExc_ValueError, "window_best: entries of different lengths, or ns/span not int64");
        goto out;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t w = int_at(&v[0], k), c = int_at(&v[2], k);
        if (w < 0 || w >= n_win || (k && w < int_at(&v[0], k - 1)) || c < -1
            || (int_at(&v[1], k) == 0 && c >= n_sync - 1 && c != -1)) {
            PyErr_SetString(PyExc_ValueError, "window_best: windows out of range or not ascending, or a code beyond the table");
            goto out;
        }
    }
    best = malloc((size_t)(n_win ? n_win : 1) * sizeof *best);
    sync = calloc((size_t)(n_win ? n_win : 1), 1);
    if (!best || !sync) { PyErr_NoMemory(); goto out; }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t w = 0; w < n_win; w++) best[w] = -1;
    for (Py_ssize_t i = 0; i < n;) {
        int64_t w = int_at(&v[0], i), m0 = -1, m1 = -1, ma = -1, b0 = -1, b1 = -1, ba = -1;
        double s = 0.0;
        Py_ssize_t k = i;
        for (; k < n && int_at(&v[0], k) == w; k++) {
            int64_t src = int_at(&v[1], k), val = ((const int64_t *)v[3].buf)[k];
            if (src == 0) {
                int64_t c = int_at(&v[2], k);
                if (int_at(&v[5], c >= 0 ? c : n_sync - 1)) s += (double)val;
                if (val > m0) { m0 = val; b0 = k; }
            } else if (src == 1 && val > m1) { m1 = val; b1 = k; }
            if (val > ma) { ma = val; ba = k; }
        }
        int64_t sp = ((const int64_t *)v[4].buf)[w], r = -1;
        sync[w] = s * 2.0 > (double)sp;
        if (b0 >= 0 && m0 * 2 > sp) r = b0;
        else if (b1 >= 0 && m1 * 2 > sp) r = b1;
        else if (ba >= 0 && (double)ma >= share * (double)sp) r = ba;
        best[w] = r;
        i = k;
    }
    Py_END_ALLOW_THREADS
    {
        PyObject *a = PyBytes_FromStringAndSize((const char *)best, (Py_ssize_t)(n_win * sizeof *best));
        PyObject *b = PyBytes_FromStringAndSize((const char *)sync, n_win);
        if (a && b) result = PyTuple_Pack(2, a, b);
        Py_XDECREF(a);
        Py_XDECREF(b);
    }
out:
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    free(best);
    free(sync);
    return result;
}

/* flatten(layers, wl, wh, sums) -> (start, end, code) int64 bytes, or with ``sums`` (win int32, code,
 * ns int64) bytes: what ``ThreadActivity.exclusive_sums`` sums, one thread's calls flattened into one
 * disjoint layer, in one sweep. ``layers``: a sequence of (st, en, codes, offset, r0, r1) in priority
 * order (CUDA API, OS runtime, NVTX): start-sorted int64 starts and ends, name codes (int8..int64),
 * the layer's code offset, and the rows [r0, r1) that may touch the windows. ``wl``, ``wh``: sorted,
 * disjoint windows (int64). At each moment the owner is the first layer with a call open then, and in
 * it the latest-starting open call (ties: the later row), the rule of intervals.innermost; each piece
 * carries offset + code of its owner and is clipped to the windows. Without ``sums``: the pieces,
 * start-sorted (adjacent pieces of one code joined); with it: their time per (window, code), ordered
 * by window, then code (clipped_sums of the pieces, without them). A stack per layer holds its
 * started calls in start order; calls closed by now are popped lazily from the top, so the top left
 * is the owner. */
#define FLAT_LAYERS 8
typedef struct { const int64_t *st, *en; const void *codes; Py_ssize_t code_size; int64_t offset, r0, r1, p; int64_t *stack; Py_ssize_t sp; } FlatLayer;

/* where the sweep's pieces go: the pieces themselves, or per window sums of their time by code */
typedef struct {
    int sums;
    Vec a, b, c;          /* pieces: start, end, code; sums: window (int32), code, ns */
    Py_ssize_t window;    /* sums: the window whose entries are in buf (-1: none yet) */
    CodeNs *buf;
    size_t n, cap;
} FlatSink;

static int sink_flush(FlatSink *k) {
    if (k->n > 16) {
        qsort(k->buf, k->n, sizeof *k->buf, cmp_code);
    } else {  /* a window's few names: an insertion sort, no qsort call per window */
        for (size_t i = 1; i < k->n; i++) {
            CodeNs x = k->buf[i];
            size_t j = i;
            for (; j > 0 && k->buf[j - 1].code > x.code; j--) k->buf[j] = k->buf[j - 1];
            k->buf[j] = x;
        }
    }
    for (size_t i = 0; i < k->n;) {
        int64_t c = k->buf[i].code, tot = 0;
        for (; i < k->n && k->buf[i].code == c; i++) tot += k->buf[i].ns;
        if (vec_push(&k->a, (int64_t)k->window) < 0 || vec_push(&k->b, c) < 0 || vec_push(&k->c, tot) < 0) return -1;
    }
    k->n = 0;
    return 0;
}

static int sink_put(FlatSink *k, Py_ssize_t w, int64_t s, int64_t e, int64_t c) {
    if (!k->sums) {
        if (k->b.n && ((int64_t *)k->b.p)[k->b.n - 1] == s && ((int64_t *)k->c.p)[k->c.n - 1] == c) {
            ((int64_t *)k->b.p)[k->b.n - 1] = e;
            return 0;
        }
        return (vec_push(&k->a, s) < 0 || vec_push(&k->b, e) < 0 || vec_push(&k->c, c) < 0) ? -1 : 0;
    }
    if (w != k->window) {
        if (k->window >= 0 && sink_flush(k) < 0) return -1;
        k->window = w;
    }
    if (k->n && k->buf[k->n - 1].code == c) {  /* the same owner's name again: one entry */
        k->buf[k->n - 1].ns += e - s;
        return 0;
    }
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 64;
        CodeNs *q = realloc(k->buf, cap * sizeof *q);
        if (!q) return -1;
        k->buf = q;
        k->cap = cap;
    }
    k->buf[k->n].code = c;
    k->buf[k->n].ns = e - s;
    k->n++;
    return 0;
}

/* the sweep itself (GIL released by the caller); -1 when out of memory */
static int flat_sweep(FlatLayer *L, Py_ssize_t nl, const int64_t *wl, const int64_t *wh, Py_ssize_t nw, FlatSink *sink) {
    Py_ssize_t wp = 0;
    int64_t t = nw ? wl[0] : 0;
    while (wp < nw) {
        if (t < wl[wp]) t = wl[wp];  /* nothing is emitted between windows: jump to the next one */
        int64_t next = INT64_MAX;
        int owner = -1;
        for (Py_ssize_t k = 0; k < nl; k++) {
            FlatLayer *F = &L[k];
            while (F->p < F->r1 && F->st[F->p] <= t) F->stack[F->sp++] = F->p++;
            if (F->p < F->r1 && F->st[F->p] < next) next = F->st[F->p];
            if (owner < 0) {
                while (F->sp && F->en[F->stack[F->sp - 1]] <= t) F->sp--;
                if (F->sp) owner = (int)k;
            }
        }
        if (owner < 0) {
            if (next == INT64_MAX) break;
            t = next;
        } else {
            FlatLayer *F = &L[owner];
            int64_t row = F->stack[F->sp - 1], stop = F->en[row] < next ? F->en[row] : next;
            int64_t c = F->offset + sized_at(F->codes, F->code_size, row);
            for (Py_ssize_t k = wp; k < nw && wl[k] < stop; k++) {
                int64_t s = t > wl[k] ? t : wl[k], e = stop < wh[k] ? stop : wh[k];
                if (e > s && sink_put(sink, k, s, e, c) < 0) return -1;
            }
            t = stop;
        }
        while (wp < nw && wh[wp] <= t) wp++;
    }
    if (sink->sums && sink->window >= 0 && sink_flush(sink) < 0) return -1;
    return 0;
}

static PyObject *py_flatten(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *seq, *wlo, *who;
    int sums = 0;
    if (!PyArg_ParseTuple(args, "OOO|p", &seq, &wlo, &who, &sums)) return NULL;
    PyObject *fast = PySequence_Fast(seq, "flatten: a sequence of layers");
    if (!fast) return NULL;
    Py_ssize_t nl = PySequence_Fast_GET_SIZE(fast);
    PyObject *result = NULL;
    Py_buffer views[3 * FLAT_LAYERS + 2];
    int got = 0, failed = 0;
    FlatLayer L[FLAT_LAYERS];
    memset(L, 0, sizeof L);
    FlatSink sink = {sums, {0, 0, 0, sums ? 4 : 8}, {0, 0, 0, 8}, {0, 0, 0, 8}, -1, NULL, 0, 0};
    if (nl > FLAT_LAYERS) { PyErr_SetString(PyExc_ValueError, "flatten: too many layers"); goto out; }
    for (Py_ssize_t k = 0; k < nl; k++) {
        PyObject *st, *en, *codes;
        long long offset, r0, r1;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, k), "OOOLLL", &st, &en, &codes, &offset, &r0, &r1)) goto out;
        PyObject *cols[3] = {st, en, codes};
        Py_ssize_t n[3];
        for (int i = 0; i < 3; i++) {
            int r = i == 2 ? int_view(cols[i], &views[got], "flatten") : int64_view(cols[i], &views[got], "flatten");
            if (r != -1) got++;
            if (r) goto out;
            n[i] = views[got - 1].len / views[got - 1].itemsize;
        }
        if (n[1] != n[0] || n[2] != n[0] || r0 < 0 || r1 > n[0]) {
            PyErr_SetString(PyExc_ValueError, "flatten: columns of different lengths or rows out of bounds");
            goto out;
        }
        L[k].st = (const int64_t *)views[got - 3].buf;
        L[k].en = (const int64_t *)views[got - 2].buf;
        L[k].codes = views[got - 1].buf;
        L[k].code_size = views[got - 1].itemsize;
        L[k].offset = offset;
        L[k].r0 = L[k].p = r0;
        L[k].r1 = r1 > r0 ? r1 : r0;
        if (L[k].r1 > L[k].r0 && !(L[k].stack = malloc((size_t)(L[k].r1 - L[k].r0) * sizeof(int64_t)))) {
            PyErr_NoMemory();
            goto out;
        }
    }
    for (int i = 0; i < 2; i++) {
        int r = int64_view(i ? who : wlo, &views[got], "flatten");
        if (r != -1) got++;
        if (r) goto out;
    }
    const int64_t *wl = (const int64_t *)views[got - 2].buf, *wh = (const int64_t *)views[got - 1].buf;
    Py_ssize_t nw = views[got - 2].len / 8;
    if (views[got - 1].len / 8 != nw) { PyErr_SetString(PyExc_ValueError, "flatten: windows of different lengths"); goto out; }
    if (nw > INT32_MAX) { PyErr_SetString(PyExc_OverflowError, "flatten: over 2^31 windows"); goto out; }
    for (Py_ssize_t k = 1; k < nw; k++)
        if (wl[k] < wh[k - 1]) { PyErr_SetString(PyExc_ValueError, "flatten: windows not sorted and disjoint"); goto out; }
    Py_BEGIN_ALLOW_THREADS
    {   /* room for a few entries per window up front: no doubling copies on the way */
        size_t want = 4 * (size_t)nw + 1024;
        failed = vec_reserve(&sink.a, want) < 0 || vec_reserve(&sink.b, want) < 0 || vec_reserve(&sink.c, want) < 0;
    }
    if (!failed) failed = flat_sweep(L, nl, wl, wh, nw, &sink) < 0;
    Py_END_ALLOW_THREADS
    if (failed) { PyErr_NoMemory(); goto out; }
    result = vec_bytes3(&sink.a, &sink.b, &sink.c);
out:
    for (int i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    for (int k = 0; k < FLAT_LAYERS; k++) free(L[k].stack);
    free(sink.a.p);
    free(sink.b.p);
    free(sink.c.p);
    free(sink.buf);
    Py_DECREF(fast);
    return result;
}

/* union_merged(a_s, a_e, b_s, b_e, out_s, out_e) -> n: the union of two merged interval sets (each
 * sorted and disjoint) as a merged set, intervals that touch joined, written into the first n rows
 * of out_s and out_e (writable int64, at least len(a) + len(b) rows each): what intervals.union
 * computes with numpy (b placed among a by binary search, then merged), in one walk of both, with no
 * copy of its output. Equal starts take a's interval first. */
static PyObject *py_union_merged(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5])) return NULL;
    Py_buffer views[6];
    int got = 0;
    PyObject *result = NULL;
    for (int i = 0; i < 6; i++) {
        int r = int64_buffer(objs[i], &views[got], "union_merged", i >= 4);  /* the last two: written */
        if (r != -1) got++;
        if (r) goto out;
    }
    const int64_t *as = views[0].buf, *ae = views[1].buf, *bs = views[2].buf, *be = views[3].buf;
    int64_t *os_ = views[4].buf, *oe_ = views[5].buf;
    Py_ssize_t na = views[0].len / 8, nb = views[2].len / 8;
    if (views[1].len / 8 != na || views[3].len / 8 != nb) {
        PyErr_SetString(PyExc_ValueError, "union_merged: columns of different lengths");
        goto out;
    }
    if (views[4].len / 8 < na + nb || views[5].len / 8 < na + nb) {
        PyErr_SetString(PyExc_ValueError, "union_merged: outputs shorter than both sets");
        goto out;
    }
    Py_ssize_t n = 0;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t i = 0, j = 0;
    int open = 0;
    int64_t cs = 0, ce = 0;
    while (i < na || j < nb) {
        int64_t s0, e0;
        if (j >= nb || (i < na && as[i] <= bs[j])) { s0 = as[i]; e0 = ae[i]; i++; }
        else { s0 = bs[j]; e0 = be[j]; j++; }
        if (open && s0 <= ce) {
            if (e0 > ce) ce = e0;
            continue;
        }
        if (open) { os_[n] = cs; oe_[n] = ce; n++; }
        cs = s0;
        ce = e0;
        open = 1;
    }
    if (open) { os_[n] = cs; oe_[n] = ce; n++; }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(n);
out:
    for (int k = 0; k < got; k++) PyBuffer_Release(&views[k]);
    return result;
}

/* -- spill: numpy's large arrays in files, for traces larger than memory ----------------------------
 *
 * A numpy data-memory handler (NEP 49: PyDataMem_SetHandler, numpy >= 1.22). An allocation of at
 * least `threshold` bytes is a shared mapping of its own unlinked file in the spill directory
 * (O_TMPFILE, else a named file unlinked at once), its blocks reserved up front (posix_fallocate: a
 * full disk fails the allocation, never a later write with SIGBUS); the kernel writes its pages back
 * and drops them under memory pressure, so the process's memory is bounded by what it touches, not by
 * what it holds. Smaller ones stay on the C heap. Every block carries a 16-byte header just before the
 * pointer numpy gets (which kind, the size asked for), so free and realloc need no table. A file
 * mapping that cannot be made (no space, no directory) falls back to the heap, counted. */
#ifdef __linux__
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdio.h>

typedef struct {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr, size_t size);
} SpillAllocator;  /* numpy's PyDataMemAllocator */

typedef struct {
    char name[127];
    uint8_t version;  /* 1 */
    SpillAllocator allocator;
} SpillHandler;  /* numpy's PyDataMem_Handler */

typedef struct {
    char dir[4096];
    size_t threshold;
    size_t page;
    int64_t live, peak, files, fallbacks;  /* file-backed bytes now and at most; files made; heap fallbacks */
} SpillCtx;

typedef struct { uint64_t magic; uint64_t size; } SpillHdr;
#define SPILL_HEAP 0x6e7379736e48ULL
#define SPILL_FILE 0x6e7379736e46ULL

static void *spill_heap(size_t size, int zero) {
    SpillHdr *h = zero ? calloc(1, size + sizeof(SpillHdr)) : malloc(size + sizeof(SpillHdr));
    if (!h) return NULL;
    h->magic = SPILL_HEAP;
    h->size = size;
    return h + 1;
}

static int spill_fd(SpillCtx *c) {
    int fd;
#ifdef O_TMPFILE
    fd = open(c->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
#endif
    char path[4200];
    snprintf(path, sizeof path, "%s/nsysan-spill-XXXXXX", c->dir);
    fd = mkostemp(path, O_CLOEXEC);
    if (fd >= 0) unlink(path);
    return fd;
}

/* A file mapping of `size` bytes after a header page; NULL when it cannot be made. */
static void *spill_map(SpillCtx *c, size_t size) {
    size_t total = size + c->page;
    if (total < size) return NULL;
    int fd = spill_fd(c);
    if (fd < 0) return NULL;
    int e = posix_fallocate(fd, 0, (off_t)total);
    if (e == EOPNOTSUPP || e == EINVAL) e = ftruncate(fd, (off_t)total) ? errno : 0;
    if (e) { close(fd); return NULL; }
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);  /* the mapping keeps the file; it is gone with the mapping */
    if (p == MAP_FAILED) return NULL;
    SpillHdr *h = (SpillHdr *)((char *)p + c->page) - 1;
    h->magic = SPILL_FILE;
    h->size = size;
    int64_t now = __atomic_add_fetch(&c->live, (int64_t)size, __ATOMIC_RELAXED);
    int64_t was = __atomic_load_n(&c->peak, __ATOMIC_RELAXED);
    while (now > was && !__atomic_compare_exchange_n(&c->peak, &was, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    __atomic_add_fetch(&c->files, 1, __ATOMIC_RELAXED);
    return h + 1;
}

static void *spill_alloc(SpillCtx *c, size_t size, int zero) {
    if (size >= c->threshold) {
        void *p = spill_map(c, size);  /* a fresh file reads as zeros */
        if (p) return p;
        __atomic_add_fetch(&c->fallbacks, 1, __ATOMIC_RELAXED);
    }
    return spill_heap(size, zero);
}

static void *spill_malloc(void *ctx, size_t size) { return spill_alloc(ctx, size, 0); }

static void *spill_calloc(void *ctx, size_t n, size_t el) {
    if (el && n > SIZE_MAX / el) return NULL;
    return spill_alloc(ctx, n * el, 1);
}

static void spill_free(void *ctx, void *ptr, size_t size) {
    (void)size;  /* the header's size is the one allocated */
    if (!ptr) return;
    SpillCtx *c = ctx;
    SpillHdr *h = (SpillHdr *)ptr - 1;
    if (h->magic == SPILL_FILE) {
        size_t n = h->size;
        __atomic_sub_fetch(&c->live, (int64_t)n, __ATOMIC_RELAXED);
        munmap((char *)ptr - c->page, n + c->page);
    } else {
        free(h);
    }
}

static void *spill_realloc(void *ctx, void *ptr, size_t size) {
    SpillCtx *c = ctx;
    if (!ptr) return spill_malloc(ctx, size);
    SpillHdr *h = (SpillHdr *)ptr - 1;
    if (h->magic == SPILL_HEAP && size < c->threshold) {
        SpillHdr *g = realloc(h, size + sizeof(SpillHdr));
        if (!g) return NULL;
        g->size = size;
        return g + 1;
    }
    void *q = spill_malloc(ctx, size);
    if (!q) return NULL;
    memcpy(q, ptr, h->size < size ? h->size : size);
    spill_free(ctx, ptr, h->size);
    return q;
}

static void spill_capsule_free(PyObject *cap) {
    SpillHandler *h = PyCapsule_GetPointer(cap, "mem_handler");
    if (h) { free(h->allocator.ctx); free(h); }
}

/* numpy's C-API table (slot 304: PyDataMem_SetHandler, since numpy 1.22's API version 0xf), looked up
 * once (every thread of a spilled run sets the handler, the growing pool before each task). */
static void **numpy_api_table;

static void **numpy_api(void) {
    if (numpy_api_table) return numpy_api_table;
    PyObject *m = PyImport_ImportModule("numpy._core._multiarray_umath");
    if (!m) { PyErr_Clear(); m = PyImport_ImportModule("numpy.core._multiarray_umath"); }
    if (!m) return NULL;
    PyObject *cap = PyObject_GetAttrString(m, "_ARRAY_API");
    Py_DECREF(m);
    if (!cap) return NULL;
    void **api = PyCapsule_GetPointer(cap, NULL);
    Py_DECREF(cap);
    if (!api) return NULL;
    unsigned int (*feature)(void) = (unsigned int (*)(void))api[211];  /* PyArray_GetNDArrayCFeatureVersion */
    if (feature() < 0xf) { PyErr_SetString(PyExc_RuntimeError, "numpy older than 1.22: no memory handlers"); return NULL; }
    numpy_api_table = api;  /* (the GIL is held: no race) */
    return api;
}

static PyObject *py_spill_handler(PyObject *self, PyObject *args) {
    const char *dir;
    Py_ssize_t threshold;
    if (!PyArg_ParseTuple(args, "sn", &dir, &threshold)) return NULL;
    if (strlen(dir) >= 4096 || threshold < 1) { PyErr_SetString(PyExc_ValueError, "spill_handler: bad directory or threshold"); return NULL; }
    SpillHandler *h = calloc(1, sizeof *h);
    SpillCtx *c = calloc(1, sizeof *c);
    if (!h || !c) { free(h); free(c); return PyErr_NoMemory(); }
    strcpy(c->dir, dir);
    c->threshold = (size_t)threshold;
    long page = sysconf(_SC_PAGESIZE);
    c->page = page > 0 ? (size_t)page : 4096;
    snprintf(h->name, sizeof h->name, "nsysan_spill");
    h->version = 1;
    h->allocator = (SpillAllocator){c, spill_malloc, spill_calloc, spill_realloc, spill_free};
    PyObject *cap = PyCapsule_New(h, "mem_handler", spill_capsule_free);
    if (!cap) { free(h); free(c); }
    return cap;
}

static PyObject *py_spill_set(PyObject *self, PyObject *handler) {
    void **api = numpy_api();
    if (!api) return NULL;
    PyObject *(*set)(PyObject *) = (PyObject *(*)(PyObject *))api[304];
    return set(handler);  /* the handler this thread's context had (a new reference) */
}

static PyObject *py_spill_stats(PyObject *self, PyObject *cap) {
    SpillHandler *h = PyCapsule_GetPointer(cap, "mem_handler");
    if (!h) return NULL;
    if (strcmp(h->name, "nsysan_spill") != 0) { PyErr_SetString(PyExc_ValueError, "not a spill handler"); return NULL; }
    SpillCtx *c = h->allocator.ctx;
    return Py_BuildValue("(LLLL)", (long long)__atomic_load_n(&c->live, __ATOMIC_RELAXED),
                         (long long)__atomic_load_n(&c->peak, __ATOMIC_RELAXED),
                         (long long)__atomic_load_n(&c->files, __ATOMIC_RELAXED),
                         (long long)__atomic_load_n(&c->fallbacks, __ATOMIC_RELAXED));
}
#endif

static PyMethodDef methods[] = {
#ifdef __linux__
    {"spill_handler", py_spill_handler, METH_VARARGS,
     "spill_handler(directory, threshold) -> numpy memory handler (capsule): arrays of threshold bytes or more in files"},
    {"spill_set", py_spill_set, METH_O, "spill_set(handler) -> the handler this thread's context had (numpy's PyDataMem_SetHandler)"},
    {"spill_stats", py_spill_stats, METH_O, "spill_stats(handler) -> (live bytes, peak bytes, files, heap fallbacks)"},
#endif
    {"union_merged", py_union_merged, METH_VARARGS,
     "union_merged(a_s, a_e, b_s, b_e, out_s, out_e) -> n: the union of two merged interval sets, merged, into out[:n]"},
    {"flatten", py_flatten, METH_VARARGS,
     "flatten(layers, wl, wh[, sums]) -> (start, end, code) int64 bytes, or (win int32, code, ns int64) bytes: "
     "a thread's calls as one disjoint layer in the windows, or its time per window and code"},
    {"clipped_sums", py_clipped_sums, METH_VARARGS,
     "clipped_sums(st, en, codes, lo, hi, i0, i1, rows|None, filter) -> (win int32, code int32, ns int64) bytes"},
    {"window_best", py_window_best, METH_VARARGS,
     "window_best(win, src, code, ns, span, sync_code, share) -> (best int64 bytes, sync uint8 bytes)"},
    {"search_sorted", py_search_sorted, METH_VARARGS,
     "search_sorted(a, v, right, out): out = numpy.searchsorted(a, v, side) for ascending int64 a, galloping"},
    {"lane", py_lane, METH_VARARGS, "lane(order|None, start, end, name, kind|int, depth|None, t0) -> (bytes, covered ns): a timeline lane"},
    {"varints", py_varints, METH_VARARGS, "varints(columns) -> bytes: LEB128 of each int64 column, concatenated"},
    {"leaves", py_leaves, METH_VARARGS, "leaves(fd, page_size, reserved, file_size, root) -> bytes (uint32 page, cells pairs)"},
    {"decode", py_decode, METH_VARARGS,
     "decode(fd, page_size, reserved, file_size, leaves, fields, rowid_out, outputs[, overflow]) -> rows"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_btree", "Direct reader for SQLite table b-trees.", -1, methods,
                                     NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__btree(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Unsupported = PyErr_NewException("nsysan._native._btree.Unsupported", PyExc_ValueError, NULL);
    if (!Unsupported || PyModule_AddObject(m, "Unsupported", Unsupported) < 0) {
        Py_XDECREF(Unsupported);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(Unsupported);
    if (PyModule_AddIntConstant(m, "VERSION", 9) < 0) { Py_DECREF(m); return NULL; }
    return m;
}
