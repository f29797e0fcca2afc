/*
 * ushuffle._rows: the per-row work of the Dask shuffle in C
 * (python/ushuffle/rows.py says what each function is for).
 *
 * hash_partition: the partition of every row, as dask's
 *   partitioning_index computes it (pandas' hash_array mixing of each key
 *   column, combined as hash_pandas_object combines a frame's columns)
 *   or as a column of partition ids gives it, and the rows in partition
 *   order (a stable counting sort), in one call with the GIL released.
 * encode_str: a column of Python str (None, NaN) as lengths, starts and
 *   UTF-8, in one pass in row order.
 * pack: rows order[a:b] of a frame's columns, gathered straight into a
 *   record in the writer's push buffer: fixed-width columns as their
 *   bytes, string columns as int32 lengths (-1 None, -2 NaN) then UTF-8.
 *   As many rows as fit: no sorted copy of any column, no pickle.
 * unpack_str: a packed string column back into an object array's cells.
 *
 * A CPython extension rather than cffi: the string columns are Python
 * objects, and only the C API reads their UTF-8 without a copy.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define STR_NONE (-1)
#define STR_NAN (-2)

static Py_ssize_t pad8(Py_ssize_t n)
{
	return (n + 7) & ~(Py_ssize_t)7;
}

/* Whether a str's UTF-8 might not fit an int32 length (4 bytes per
 * character at most). */
static int len_overflows(PyObject *o)
{
	return PyUnicode_GET_LENGTH(o) > INT32_MAX / 4;
}

/* pandas/core/util/hashing.py, _hash_ndarray: the last five lines. */
static uint64_t mix(uint64_t v)
{
	v ^= v >> 30;
	v *= 0xBF58476D1CE4E5B9ULL;
	v ^= v >> 27;
	v *= 0x94D049BB133111EBULL;
	v ^= v >> 31;
	return v;
}

/* Element i of a column of `size`-byte values, zero-extended as
 * vals.view(f"u{size}").astype("u8") does. */
static uint64_t load(const unsigned char *p, Py_ssize_t size, Py_ssize_t i)
{
	uint8_t u8;
	uint16_t u16;
	uint32_t u32;
	uint64_t u64;

	switch (size) {
	case 1:
		memcpy(&u8, p + i, 1);
		return u8;
	case 2:
		memcpy(&u16, p + 2 * i, 2);
		return u16;
	case 4:
		memcpy(&u32, p + 4 * i, 4);
		return u32;
	default:
		memcpy(&u64, p + 8 * i, 8);
		return u64;
	}
}

enum { KEY_RAW, KEY_HASHED, KEY_IDS };

struct key {
	Py_buffer buf;
	Py_ssize_t size;	/* bytes per value */
	int mode;		/* KEY_HASHED: pandas' hash (uint64) already;
				 * KEY_IDS: the partitions (int64) */
};

static void keys_release(struct key *k, Py_ssize_t n)
{
	for (Py_ssize_t i = 0; i < n; i++)
		PyBuffer_Release(&k[i].buf);
	PyMem_Free(k);
}

/* The keys argument: (mode, itemsize, buffer) per key column, each
 * buffer n values long. */
static struct key *keys_get(PyObject *seq, Py_ssize_t n, Py_ssize_t *nkeys)
{
	PyObject *fast = PySequence_Fast(seq, "keys: a sequence");
	if (!fast)
		return NULL;
	Py_ssize_t m = PySequence_Fast_GET_SIZE(fast), got = 0;
	struct key *k = PyMem_Calloc(m ? m : 1, sizeof(*k));
	if (!k) {
		Py_DECREF(fast);
		PyErr_NoMemory();
		return NULL;
	}
	for (; got < m; got++) {
		PyObject *t = PySequence_Fast_GET_ITEM(fast, got);
		struct key *x = &k[got];
		if (!PyArg_ParseTuple(t, "iny*;keys: (mode, itemsize, buffer)",
				      &x->mode, &x->size, &x->buf))
			goto fail;
		if ((x->size != 1 && x->size != 2 && x->size != 4 &&
		     x->size != 8) || (x->mode != KEY_RAW && x->size != 8) ||
		    x->mode < KEY_RAW || x->mode > KEY_IDS ||
		    (x->mode == KEY_IDS && m != 1) ||
		    x->buf.len != n * x->size) {
			PyBuffer_Release(&x->buf);
			PyErr_Format(PyExc_ValueError,
				     "keys: column %zd has %zd bytes, not %zd "
				     "values of a valid size (%zd)", got,
				     x->buf.len, n, x->size);
			goto fail;
		}
	}
	Py_DECREF(fast);
	*nkeys = m;
	return k;
fail:
	keys_release(k, got);
	Py_DECREF(fast);
	return NULL;
}

/* hash_pandas_object's value per row: one key column's hash, or
 * combine_hash_arrays over several (tupleobject.c's combination). */
static void hash_rows(const struct key *k, Py_ssize_t nkeys, int combine,
		      Py_ssize_t n, uint64_t *h)
{
	uint64_t mult = 1000003;

	for (Py_ssize_t i = 0; i < n; i++)
		h[i] = combine ? 0x345678 : 0;
	for (Py_ssize_t c = 0; c < nkeys; c++) {
		const unsigned char *p = k[c].buf.buf;
		for (Py_ssize_t i = 0; i < n; i++) {
			uint64_t v = load(p, k[c].size, i);
			if (k[c].mode == KEY_RAW)
				v = mix(v);
			h[i] = combine ? (h[i] ^ v) * mult : v;
		}
		mult += 82520 + 2 * (uint64_t)(nkeys - c);
	}
	if (combine)
		for (Py_ssize_t i = 0; i < n; i++)
			h[i] += 97531;
}

/* hash_partition(keys, n, combine, nparts, order, counts): keys as
 * keys_get takes them; fills order (n int64: the rows, partition by
 * partition, each in its input order) and counts (nparts int64). */
static PyObject *hash_partition(PyObject *self, PyObject *args)
{
	PyObject *keyseq, *ret = NULL;
	Py_ssize_t n, nparts, nkeys = 0;
	int combine;
	Py_buffer order, counts;
	struct key *k = NULL;
	uint64_t *h = NULL;
	int64_t *start = NULL;

	(void)self;
	if (!PyArg_ParseTuple(args, "Onpnw*w*", &keyseq, &n, &combine,
			      &nparts, &order, &counts))
		return NULL;
	if (nparts < 1 || n < 0 || order.len != n * 8 ||
	    counts.len != nparts * 8) {
		PyErr_SetString(PyExc_ValueError, "hash_partition: order must "
				"hold n int64, counts nparts int64");
		goto out;
	}
	k = keys_get(keyseq, n, &nkeys);
	if (!k)
		goto out;
	if (nkeys < 1 || (!combine && nkeys != 1)) {
		PyErr_SetString(PyExc_ValueError, "hash_partition: one key "
				"column, or several combined");
		goto out;
	}
	h = PyMem_RawMalloc(n ? n * sizeof(*h) : 1);
	start = PyMem_RawMalloc(nparts * sizeof(*start));
	if (!h || !start) {
		PyErr_NoMemory();
		goto out;
	}
	int64_t *o = order.buf, *cnt = counts.buf;
	Py_BEGIN_ALLOW_THREADS
	hash_rows(k, nkeys, combine, n, h);
	memset(cnt, 0, nparts * sizeof(*cnt));
	for (Py_ssize_t i = 0; i < n; i++) {
		h[i] %= (uint64_t)nparts;
		cnt[h[i]]++;
	}
	/* A stable counting sort, as dask's groupsort_indexer: the rows of
	 * a partition keep their input order. */
	int64_t sum = 0;
	for (Py_ssize_t p = 0; p < nparts; p++) {
		start[p] = sum;
		sum += cnt[p];
	}
	for (Py_ssize_t i = 0; i < n; i++)
		o[start[h[i]]++] = i;
	Py_END_ALLOW_THREADS
	ret = Py_NewRef(Py_None);
out:
	PyMem_RawFree(h);
	PyMem_RawFree(start);
	if (k)
		keys_release(k, nkeys);
	PyBuffer_Release(&order);
	PyBuffer_Release(&counts);
	return ret;
}

/* A string cell's UTF-8 (*p) and length, or STR_NONE / STR_NAN; -3
 * for anything else. */
static Py_ssize_t cell(PyObject *o, const char **p)
{
	Py_ssize_t len;

	if (o == Py_None)
		return STR_NONE;
	if (PyFloat_CheckExact(o) && Py_IS_NAN(PyFloat_AS_DOUBLE(o)))
		return STR_NAN;
	if (!PyUnicode_CheckExact(o) || len_overflows(o))
		return -3;
	*p = PyUnicode_AsUTF8AndSize(o, &len);
	if (!*p) {
		PyErr_Clear();
		return -3;
	}
	return len;
}

/* encode_str(list) -> (lens, starts, utf8) or None: a column of str,
 * None and float NaN cells as pack carries it (each cell's int32
 * length or STR_NONE / STR_NAN, where its UTF-8 starts, all the UTF-8
 * in row order); None when a cell is anything else. One pass in row
 * order: pack then gathers from dense arrays, not from objects spread
 * over the heap. */
static PyObject *encode_str(PyObject *self, PyObject *list)
{
	PyObject *lens, *starts = NULL, *data = NULL;
	Py_ssize_t n, total = 0;

	(void)self;
	if (!PyList_CheckExact(list)) {
		PyErr_SetString(PyExc_TypeError, "encode_str: a list");
		return NULL;
	}
	n = PyList_GET_SIZE(list);
	lens = PyBytes_FromStringAndSize(NULL, n * 4);
	starts = PyBytes_FromStringAndSize(NULL, n * 8);
	if (!lens || !starts)
		goto fail;
	int32_t *ln = (int32_t *)PyBytes_AS_STRING(lens);
	int64_t *st = (int64_t *)PyBytes_AS_STRING(starts);
	for (Py_ssize_t i = 0; i < n; i++) {
		const char *p;
		Py_ssize_t len = cell(PyList_GET_ITEM(list, i), &p);
		if (len == -3) {
			Py_DECREF(lens);
			Py_DECREF(starts);
			Py_RETURN_NONE;
		}
		ln[i] = (int32_t)len;
		st[i] = total;
		total += len > 0 ? len : 0;
	}
	data = PyBytes_FromStringAndSize(NULL, total);
	if (!data)
		goto fail;
	char *d = PyBytes_AS_STRING(data);
	for (Py_ssize_t i = 0; i < n; i++) {
		const char *p = NULL;
		if (ln[i] > 0) {
			cell(PyList_GET_ITEM(list, i), &p);
			memcpy(d + st[i], p, ln[i]);
		}
	}
	return Py_BuildValue("NNN", lens, starts, data);
fail:
	Py_XDECREF(lens);
	Py_XDECREF(starts);
	return NULL;
}

enum { COL_RAW, COL_RANGE, COL_STR };

struct col {
	int kind;
	Py_ssize_t size;	/* COL_RAW: bytes per value */
	Py_buffer buf;		/* COL_RAW: the values; COL_STR: the UTF-8 */
	Py_buffer lens, starts;	/* COL_STR, as encode_str makes them */
	long long start, step;	/* COL_RANGE: start + step * row */
};

static void cols_release(struct col *c, Py_ssize_t n)
{
	for (Py_ssize_t i = 0; i < n; i++) {
		if (c[i].kind == COL_RANGE)
			continue;
		PyBuffer_Release(&c[i].buf);
		if (c[i].kind == COL_STR) {
			PyBuffer_Release(&c[i].lens);
			PyBuffer_Release(&c[i].starts);
		}
	}
	PyMem_Free(c);
}

/* One column of the cols argument into x; its length, -1 for a range,
 * or -2 with an exception set. */
static Py_ssize_t col_get(PyObject *t, struct col *x)
{
	const char *kind;

	if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 2 ||
	    !(kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(t, 0))))
		return -2;
	if (!strcmp(kind, "r")) {
		if (!PyArg_ParseTuple(t, "sny*", &kind, &x->size, &x->buf))
			return -2;
		x->kind = COL_RAW;
		if (x->size >= 1 && x->buf.len % x->size == 0)
			return x->buf.len / x->size;
		PyBuffer_Release(&x->buf);
		return -2;
	}
	if (!strcmp(kind, "R")) {
		x->kind = COL_RANGE;
		return PyArg_ParseTuple(t, "sLL", &kind, &x->start, &x->step) ?
		       -1 : -2;
	}
	if (strcmp(kind, "s") ||
	    !PyArg_ParseTuple(t, "sy*y*y*", &kind, &x->lens, &x->starts,
			      &x->buf))
		return -2;
	x->kind = COL_STR;
	Py_ssize_t n = x->lens.len / 4;
	if (x->lens.len % 4 == 0 && x->starts.len == n * 8)
		return n;	/* col_pack checks the cells it packs */
	PyBuffer_Release(&x->lens);
	PyBuffer_Release(&x->starts);
	PyBuffer_Release(&x->buf);
	return -2;
}

/* The cols argument: ("r", itemsize, buffer), ("R", start, step) or
 * ("s", lens, starts, utf8) (encode_str's) per column, in record order;
 * every column nrows long. */
static struct col *cols_get(PyObject *fast, Py_ssize_t *ncols,
			    Py_ssize_t *nrows)
{
	Py_ssize_t m = PySequence_Fast_GET_SIZE(fast), got = 0;
	struct col *c = PyMem_Calloc(m ? m : 1, sizeof(*c));

	if (!c) {
		PyErr_NoMemory();
		return NULL;
	}
	*nrows = -1;
	for (; got < m; got++) {
		struct col *x = &c[got];
		Py_ssize_t len = col_get(PySequence_Fast_GET_ITEM(fast, got),
					 x);
		if (len == -2)
			goto bad;
		if (len >= 0 && *nrows >= 0 && len != *nrows) {
			got++;
			PyErr_Format(PyExc_ValueError, "pack: column %zd has "
				     "%zd rows, not %zd", got - 1, len, *nrows);
			goto fail;
		}
		if (len >= 0)
			*nrows = len;
	}
	*ncols = m;
	return c;
bad:
	PyErr_Clear();
	PyErr_Format(PyExc_TypeError, "pack: column %zd is not (\"r\", "
		     "itemsize, buffer), (\"R\", start, step) or (\"s\", lens, "
		     "starts, utf8) as encode_str makes them", got);
fail:
	cols_release(c, got);
	return NULL;
}

/* How far ahead of the row it packs pack prefetches: the rows are in
 * partition order, so each one is a cache miss in every column. */
#define AHEAD 16

/* Writes (d != NULL) or measures rows o[0..rows) of column c at offset
 * off of the record; returns the offset after it, 8-aligned, or -1 when
 * a string cell lies outside its column's UTF-8. */
static Py_ssize_t col_pack(const struct col *c, const int64_t *o,
			   Py_ssize_t rows, char *d, Py_ssize_t off)
{
	const char *s = c->buf.buf;
	Py_ssize_t end, z = c->size;

	switch (c->kind) {
	case COL_RAW:
		end = off + rows * z;
		for (Py_ssize_t j = 0; d && j < rows; j++) {
			if (j + AHEAD < rows)
				__builtin_prefetch(s + z * o[j + AHEAD]);
			if (z == 8)
				memcpy(d + off + 8 * j, s + 8 * o[j], 8);
			else
				memcpy(d + off + z * j, s + z * o[j], z);
		}
		break;
	case COL_RANGE:
		end = off + rows * 8;
		for (Py_ssize_t j = 0; d && j < rows; j++) {
			int64_t v = (int64_t)(c->start + c->step * o[j]);
			memcpy(d + off + 8 * j, &v, 8);
		}
		break;
	default: {
		const int32_t *ln = c->lens.buf;
		const int64_t *st = c->starts.buf;
		end = pad8(off + rows * 4);
		if (d)
			memset(d + off + rows * 4, 0, end - off - rows * 4);
		for (Py_ssize_t j = 0; j < rows; j++) {
			if (j + AHEAD < rows) {
				__builtin_prefetch(&ln[o[j + AHEAD]]);
				__builtin_prefetch(&st[o[j + AHEAD]]);
			}
			if (j + AHEAD / 2 < rows)
				__builtin_prefetch(s + st[o[j + AHEAD / 2]]);
			int32_t len = ln[o[j]];
			if (len < STR_NAN || (len > 0 &&
			    (st[o[j]] < 0 || st[o[j]] > c->buf.len - len)))
				return -1;
			if (d)
				memcpy(d + off + 4 * j, &len, 4);
			if (len > 0) {
				if (d)
					memcpy(d + end, s + st[o[j]], len);
				end += len;
			}
		}
	}
	}
	if (d)
		memset(d + end, 0, pad8(end) - end);
	return pad8(end);
}

/* How many rows of o[0..n) fit `room` bytes, padding included. */
static Py_ssize_t rows_fitting(const struct col *c, Py_ssize_t ncols,
			       const int64_t *o, Py_ssize_t n,
			       Py_ssize_t room)
{
	Py_ssize_t fixed = 0, used = 0, rows;

	for (Py_ssize_t i = 0; i < ncols; i++) {
		/* Each column pads to 8 bytes, a string column twice. */
		used += c[i].kind == COL_STR ? 16 : 8;
		fixed += c[i].kind == COL_RAW ? c[i].size :
			 c[i].kind == COL_RANGE ? 8 : 4;
	}
	for (rows = 0; rows < n; rows++) {
		Py_ssize_t cost = fixed;
		for (Py_ssize_t i = 0; i < ncols; i++) {
			if (c[i].kind != COL_STR)
				continue;
			const int32_t *ln = c[i].lens.buf;
			if (rows + AHEAD < n)
				__builtin_prefetch(&ln[o[rows + AHEAD]]);
			cost += ln[o[rows]] > 0 ? ln[o[rows]] : 0;
		}
		if (used + cost > room)
			break;
		used += cost;
	}
	return rows;
}

/* Whether rows o[0..n) are rows of columns nrows long (-1: any). */
static int rows_valid(const int64_t *o, Py_ssize_t n, Py_ssize_t nrows)
{
	for (Py_ssize_t j = 0; j < n; j++)
		if (o[j] < 0 || (nrows >= 0 && o[j] >= nrows)) {
			PyErr_Format(PyExc_ValueError, "pack: order names "
				     "row %lld of %zd", (long long)o[j], nrows);
			return 0;
		}
	return 1;
}

/* pack(dst, cols, order, a, b) -> (rows, nbytes): packs as many rows of
 * order[a:b] as fit dst (a writable buffer), column after column, with
 * the GIL released; dst None: measures all of them. Rows are not split:
 * (0, 0) when the first does not fit. */
static PyObject *pack(PyObject *self, PyObject *args)
{
	PyObject *dsto, *colseq, *fast, *ret = NULL;
	Py_buffer dst = { 0 }, order;
	Py_ssize_t a, b, ncols = 0, nrows, rows, off = 0;
	struct col *c = NULL;

	(void)self;
	if (!PyArg_ParseTuple(args, "OOy*nn", &dsto, &colseq, &order, &a, &b))
		return NULL;
	if (dsto != Py_None &&
	    PyObject_GetBuffer(dsto, &dst, PyBUF_WRITABLE) < 0) {
		PyBuffer_Release(&order);
		return NULL;
	}
	fast = PySequence_Fast(colseq, "pack: cols, a sequence");
	if (!fast)
		goto out;
	c = cols_get(fast, &ncols, &nrows);
	if (!c)
		goto out;
	if (a < 0 || a > b || b > order.len / 8) {
		PyErr_SetString(PyExc_ValueError, "pack: rows beyond order");
		goto out;
	}
	const int64_t *o = (const int64_t *)order.buf + a;
	rows = b - a;
	if (dsto != Py_None)
		rows = rows_fitting(c, ncols, o, rows, dst.len);
	if (!rows_valid(o, rows, nrows))
		goto out;
	Py_BEGIN_ALLOW_THREADS
	for (Py_ssize_t i = 0; rows && off >= 0 && i < ncols; i++)
		off = col_pack(&c[i], o, rows, dst.buf, off);
	Py_END_ALLOW_THREADS
	if (off < 0)
		PyErr_SetString(PyExc_ValueError, "pack: a string cell beyond "
				"its column's UTF-8");
	else
		ret = Py_BuildValue("nn", rows, off);
out:
	if (c)
		cols_release(c, ncols);
	Py_XDECREF(fast);
	if (dst.obj)
		PyBuffer_Release(&dst);
	PyBuffer_Release(&order);
	return ret;
}

static PyObject *nan_obj;

/* An O& converter: an int address. */
static int pointer(PyObject *o, void *out)
{
	void *p = PyLong_AsVoidPtr(o);

	if (!p && PyErr_Occurred())
		return 0;
	*(void **)out = p;
	return 1;
}

/* Short ASCII strings decoded in one unpack_str call, by a hash of
 * their bytes: a column's repeated values (a few distinct words) become
 * one object each, as they were in the map's frame, instead of one per
 * row. Borrowed: the output array holds them. */
#define SEEN 512
#define SEEN_LEN 32

static PyObject *cell_decode(const char *p, int32_t len, PyObject **seen)
{
	uint32_t h = 2166136261u;	/* FNV-1a */
	PyObject *v, **slot;

	if (len > SEEN_LEN)
		return PyUnicode_DecodeUTF8(p, len, "strict");
	for (int32_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)p[i]) * 16777619u;
	slot = &seen[h % SEEN];
	v = *slot;
	if (v && PyUnicode_GET_LENGTH(v) == len &&
	    !memcmp(PyUnicode_DATA(v), p, len))
		return Py_NewRef(v);
	v = PyUnicode_DecodeUTF8(p, len, "strict");
	if (v && PyUnicode_IS_COMPACT_ASCII(v))
		*slot = v;
	return v;
}

/* unpack_str(record, off, rows, slots) -> end: the string column pack
 * wrote at off, stored into slots (the address of `rows` references of
 * an object ndarray, which owns what they replace); end is the offset
 * after it. Each cell is stored as it is made: on an error the slots
 * hold what was read so far. */
static PyObject *unpack_str(PyObject *self, PyObject *args)
{
	Py_buffer rec;
	Py_ssize_t off, rows;
	PyObject **slots, *ret = NULL, *seen[SEEN] = { NULL };
	void *addr;

	(void)self;
	if (!PyArg_ParseTuple(args, "y*nnO&", &rec, &off, &rows,
			      pointer, &addr))
		return NULL;
	slots = addr;
	const char *r = rec.buf;
	Py_ssize_t p = pad8(off + 4 * rows);
	if (off < 0 || rows < 0 || p > rec.len)
		goto bad;
	for (Py_ssize_t j = 0; j < rows; j++) {
		int32_t len;
		PyObject *v;
		memcpy(&len, r + off + 4 * j, 4);
		if (len == STR_NONE) {
			v = Py_NewRef(Py_None);
		} else if (len == STR_NAN) {
			v = Py_NewRef(nan_obj);
		} else {
			if (len < 0 || len > rec.len - p)
				goto bad;
			v = cell_decode(r + p, len, seen);
			if (!v)
				goto out;
			p += len;
		}
		Py_SETREF(slots[j], v);
	}
	if (pad8(p) > rec.len)
		goto bad;
	ret = PyLong_FromSsize_t(pad8(p));
	goto out;
bad:
	PyErr_Format(PyExc_ValueError, "ushuffle.dask: a record that is not "
		     "a row batch (a string column of %zd rows at byte %zd "
		     "runs past its end, %zd)", rows, off, rec.len);
out:
	PyBuffer_Release(&rec);
	return ret;
}

static PyMethodDef methods[] = {
	{ "hash_partition", hash_partition, METH_VARARGS, NULL },
	{ "encode_str", encode_str, METH_O, NULL },
	{ "pack", pack, METH_VARARGS, NULL },
	{ "unpack_str", unpack_str, METH_VARARGS, NULL },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "ushuffle._rows", NULL, -1, methods,
	NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rows(void)
{
	nan_obj = PyFloat_FromDouble(Py_NAN);
	if (!nan_obj)
		return NULL;
	return PyModule_Create(&module);
}
