/*
 * multikafka.reader_agent._convert: confluent_kafka Messages -> Arrow buffers, in one
 * walk over the list, without a Python object per field per record.
 *
 * Python (multikafka/reader_agent/_cconvert.py) wraps the returned buffers with
 * pyarrow.Array.from_buffers. Two ways to read a message:
 *
 *  - direct: read the fields of confluent-kafka-python's C struct `Message`
 *    (src/confluent_kafka/src/confluent_kafka.h) at the offsets of the mirror
 *    below. Fast (a few ns per record) but layout-dependent, so Python only
 *    uses it after `check_layout` and a comparison with the accessor methods
 *    on sample messages, and every call still compares the first and last
 *    message of the batch with the accessors (spot_check).
 *  - accessors: call the public method descriptors (Message.value, ...)
 *    through the vectorcall protocol: layout-independent.
 *
 * Anything unusual (an object that is not a Message, a field that is not
 * bytes/str, a missing partition or offset, more than 2 GiB of keys or
 * values) makes `convert` return None, and Python converts that batch itself.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* confluent-kafka-python 2.x `Message` (built with RD_KAFKA_V_HEADERS). */
typedef struct {
    PyObject_HEAD
    PyObject *topic;
    PyObject *value;
    PyObject *key;
    PyObject *headers;
    void *c_headers;
    PyObject *error;
    int32_t partition;
    int64_t offset;
    int32_t leader_epoch;
    int64_t timestamp;
    int tstype; /* rd_kafka_timestamp_type_t */
    int64_t latency;
    int16_t delivery_count;
} MessageMirror;

enum { G_TOPIC, G_PARTITION, G_OFFSET, G_TIMESTAMP, G_KEY, G_VALUE, G_ERROR, G_COUNT };

/* Set by configure(): the Message type and its accessor descriptors. */
static PyTypeObject *message_type = NULL;
static PyObject *getters[G_COUNT];

/* One record's fields, borrowed references for key/value/topic. */
typedef struct {
    PyObject *topic;
    PyObject *key;
    PyObject *value;
    int64_t partition;
    int64_t offset;
    int64_t timestamp;
    int64_t tstype;
} Fields;

/* Owned references taken in accessor mode, released after the batch. */
typedef struct {
    PyObject **items;
    Py_ssize_t len, cap;
} Owned;

static int owned_push(Owned *o, PyObject *obj) {
    if (o->len == o->cap) {
        Py_ssize_t cap = o->cap ? o->cap * 2 : 1024;
        PyObject **items = PyMem_Realloc(o->items, (size_t)cap * sizeof(PyObject *));
        if (!items) {
            Py_DECREF(obj);
            PyErr_NoMemory();
            return -1;
        }
        o->items = items;
        o->cap = cap;
    }
    o->items[o->len++] = obj;
    return 0;
}

static void owned_clear(Owned *o) {
    for (Py_ssize_t i = 0; i < o->len; i++)
        Py_DECREF(o->items[i]);
    PyMem_Free(o->items);
    o->items = NULL;
    o->len = o->cap = 0;
}

static PyObject *call_getter(int which, PyObject *msg) {
    PyObject *args[1] = {msg};
    return PyObject_Vectorcall(getters[which], args, 1, NULL);
}

/* Fields through the accessors. 1 ok, 0 unsupported, -1 error. */
static int read_accessors(PyObject *msg, Fields *f, Owned *owned) {
    PyObject *obj;
    if (!PyObject_TypeCheck(msg, message_type))
        return 0;
    f->topic = call_getter(G_TOPIC, msg);
    if (!f->topic || owned_push(owned, f->topic) < 0)
        return -1;
    f->key = call_getter(G_KEY, msg);
    if (!f->key || owned_push(owned, f->key) < 0)
        return -1;
    f->value = call_getter(G_VALUE, msg);
    if (!f->value || owned_push(owned, f->value) < 0)
        return -1;
    if (f->topic == Py_None)
        f->topic = NULL;
    if (f->key == Py_None)
        f->key = NULL;
    if (f->value == Py_None)
        f->value = NULL;

    obj = call_getter(G_PARTITION, msg);
    if (!obj)
        return -1;
    f->partition = obj == Py_None ? -1 : PyLong_AsLongLong(obj);
    Py_DECREF(obj);
    obj = call_getter(G_OFFSET, msg);
    if (!obj)
        return -1;
    f->offset = obj == Py_None ? -1 : PyLong_AsLongLong(obj);
    Py_DECREF(obj);
    if (PyErr_Occurred())
        return -1;
    obj = call_getter(G_TIMESTAMP, msg);
    if (!obj)
        return -1;
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 2) {
        Py_DECREF(obj);
        return 0;
    }
    f->tstype = PyLong_AsLongLong(PyTuple_GET_ITEM(obj, 0));
    f->timestamp = PyLong_AsLongLong(PyTuple_GET_ITEM(obj, 1));
    Py_DECREF(obj);
    return PyErr_Occurred() ? -1 : 1;
}

/* Fields straight from the struct. 1 ok, 0 unsupported. */
static int read_direct(PyObject *msg, Fields *f) {
    const MessageMirror *m = (const MessageMirror *)msg;
    if (Py_TYPE(msg) != message_type)
        return 0;
    f->topic = m->topic;
    f->key = m->key;
    f->value = m->value;
    f->partition = m->partition;
    f->offset = m->offset;
    f->timestamp = m->timestamp;
    f->tstype = m->tstype;
    return 1;
}

/* The first and last message of a batch read directly must equal what the
 * accessors say (a cheap guard against a layout the import check missed).
 * 1 equal, 0 different, -1 error. */
static int spot_check(PyObject *msg) {
    Fields d, a;
    Owned owned = {0};
    int rc;
    if (read_direct(msg, &d) != 1)
        return 0;
    rc = read_accessors(msg, &a, &owned);
    if (rc == 1)
        rc = d.topic == a.topic && d.key == a.key && d.value == a.value &&
             (d.partition == a.partition || (d.partition == -1 && a.partition == -1)) &&
             (d.offset == a.offset || (d.offset < 0 && a.offset == -1)) &&
             d.timestamp == a.timestamp && d.tstype == a.tstype;
    owned_clear(&owned);
    return rc;
}

/* A small open-addressing map of (topic code, partition) -> pair code. */
typedef struct {
    int64_t *keys;
    int32_t *vals;
    Py_ssize_t cap, len;
} PairMap;

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static int pairmap_grow(PairMap *pm) {
    Py_ssize_t cap = pm->cap ? pm->cap * 2 : 64;
    int64_t *keys = PyMem_Malloc((size_t)cap * sizeof(int64_t));
    int32_t *vals = PyMem_Malloc((size_t)cap * sizeof(int32_t));
    if (!keys || !vals) {
        PyMem_Free(keys);
        PyMem_Free(vals);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < cap; i++)
        vals[i] = -1;
    for (Py_ssize_t i = 0; i < pm->cap; i++) {
        if (pm->vals[i] < 0)
            continue;
        Py_ssize_t j = (Py_ssize_t)(mix((uint64_t)pm->keys[i]) & (uint64_t)(cap - 1));
        while (vals[j] >= 0)
            j = (j + 1) & (cap - 1);
        keys[j] = pm->keys[i];
        vals[j] = pm->vals[i];
    }
    PyMem_Free(pm->keys);
    PyMem_Free(pm->vals);
    pm->keys = keys;
    pm->vals = vals;
    pm->cap = cap;
    return 0;
}

/* The pair code of `key`, or -1 with *slot set to where it would go. */
static int32_t pairmap_find(const PairMap *pm, int64_t key, Py_ssize_t *slot) {
    Py_ssize_t j = (Py_ssize_t)(mix((uint64_t)key) & (uint64_t)(pm->cap - 1));
    while (pm->vals[j] >= 0) {
        if (pm->keys[j] == key)
            return pm->vals[j];
        j = (j + 1) & (pm->cap - 1);
    }
    *slot = j;
    return -1;
}

static void pairmap_free(PairMap *pm) {
    PyMem_Free(pm->keys);
    PyMem_Free(pm->vals);
}

static inline void set_valid(uint8_t *bitmap, Py_ssize_t i) { bitmap[i >> 3] |= (uint8_t)(1u << (i & 7)); }

static PyObject *new_bytes(Py_ssize_t size, char **data) {
    PyObject *b = PyBytes_FromStringAndSize(NULL, size);
    if (b)
        *data = PyBytes_AS_STRING(b);
    return b;
}

/* A validity bitmap of n bits, all clear (NULL when nothing is null). */
static PyObject *new_bitmap(Py_ssize_t n, Py_ssize_t nulls, uint8_t **bits) {
    char *data;
    PyObject *b;
    *bits = NULL;
    if (!nulls)
        Py_RETURN_NONE;
    b = new_bytes((n + 7) / 8, &data);
    if (b) {
        memset(data, 0, (size_t)((n + 7) / 8));
        *bits = (uint8_t *)data;
    }
    return b;
}

PyDoc_STRVAR(convert_doc,
"convert(msgs, direct) -> tuple | None\n\n"
"The columns of `msgs` (a list of confluent_kafka.Message without errors) as\n"
"buffers: (key_validity, key_nulls, key_offsets, key_data, value_validity,\n"
"value_nulls, value_offsets, value_data, topics, topic_codes, partitions,\n"
"offsets, timestamps_us, timestamp_types, pairs, pair_codes, pair_last).\n"
"Validity bitmaps are None when nothing is null; offsets are int32; codes\n"
"int32 indexes into `topics` (distinct names) and `pairs` (distinct\n"
"(topic, partition), first seen first); pair_last is the index of each\n"
"pair's last record. None when the batch needs the Python converter.");

static PyObject *convert(PyObject *self, PyObject *args) {
    PyObject *list, *msgs = NULL, *out = NULL;
    int direct;
    Py_ssize_t n, i;
    Fields *fields = NULL;
    Owned owned = {0};
    PairMap pm = {0};
    PyObject *topics = NULL, *topic_index = NULL, *pairs = NULL;
    PyObject *bufs[15] = {NULL};
    enum {
        B_KVALID, B_KOFF, B_KDATA, B_VVALID, B_VOFF, B_VDATA, B_TCODE, B_PART, B_OFF,
        B_TS, B_TSTYPE, B_PCODE, B_PLAST, B_COUNT
    };
    int64_t key_bytes = 0, value_bytes = 0;
    Py_ssize_t key_nulls = 0, value_nulls = 0;
    int32_t *pair_last = NULL;
    Py_ssize_t pair_last_cap = 0;

    if (!PyArg_ParseTuple(args, "O!p:convert", &PyList_Type, &list, &direct))
        return NULL;
    if (!message_type) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    /* Our own references to the messages: the fields read directly are
     * borrowed from them until the buffers are filled. */
    msgs = PyList_AsTuple(list);
    if (!msgs)
        return NULL;
    n = PyTuple_GET_SIZE(msgs);
    if (direct && n > 0) {
        int ok = spot_check(PyTuple_GET_ITEM(msgs, 0));
        if (ok == 1 && n > 1)
            ok = spot_check(PyTuple_GET_ITEM(msgs, n - 1));
        if (ok < 0)
            goto error;
        if (ok == 0)
            goto unsupported;
    }
    fields = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Fields));
    if (!fields) {
        PyErr_NoMemory();
        goto error;
    }

    /* Pass 1: read every record; sizes and nulls. */
    for (i = 0; i < n; i++) {
        Fields *f = &fields[i];
        PyObject *msg = PyTuple_GET_ITEM(msgs, i);
        int rc = direct ? read_direct(msg, f) : read_accessors(msg, f, &owned);
        if (rc < 0)
            goto error;
        if (rc == 0 || !f->topic || !PyUnicode_CheckExact(f->topic) || f->partition < 0 ||
            f->partition > INT32_MAX || f->offset < 0 || (f->key && !PyBytes_CheckExact(f->key)) ||
            (f->value && !PyBytes_CheckExact(f->value)))
            goto unsupported;
        if (f->key)
            key_bytes += PyBytes_GET_SIZE(f->key);
        else
            key_nulls++;
        if (f->value)
            value_bytes += PyBytes_GET_SIZE(f->value);
        else
            value_nulls++;
    }
    if (key_bytes > INT32_MAX || value_bytes > INT32_MAX)
        goto unsupported; /* pa.binary() offsets are int32 */

    {
        char *kdata = NULL, *vdata = NULL, *raw = NULL;
        uint8_t *kvalid, *vvalid;
        int32_t *koff, *voff, *tcode, *part, *tstype, *pcode;
        int64_t *off, *ts;
        int32_t kpos = 0, vpos = 0;
        PyObject *last_topic = NULL;
        int32_t last_tcode = -1, last_pcode = -1;
        int64_t last_pkey = -1;

        bufs[B_KVALID] = new_bitmap(n, key_nulls, &kvalid);
        bufs[B_VVALID] = new_bitmap(n, value_nulls, &vvalid);
        bufs[B_KOFF] = new_bytes((n + 1) * 4, &raw); koff = (int32_t *)raw;
        if (!bufs[B_KOFF]) goto error;
        bufs[B_KDATA] = new_bytes((Py_ssize_t)key_bytes, &kdata);
        bufs[B_VOFF] = new_bytes((n + 1) * 4, &raw); voff = (int32_t *)raw;
        if (!bufs[B_VOFF]) goto error;
        bufs[B_VDATA] = new_bytes((Py_ssize_t)value_bytes, &vdata);
        bufs[B_TCODE] = new_bytes(n * 4, &raw); tcode = (int32_t *)raw;
        if (!bufs[B_TCODE]) goto error;
        bufs[B_PART] = new_bytes(n * 4, &raw); part = (int32_t *)raw;
        if (!bufs[B_PART]) goto error;
        bufs[B_OFF] = new_bytes(n * 8, &raw); off = (int64_t *)raw;
        if (!bufs[B_OFF]) goto error;
        bufs[B_TS] = new_bytes(n * 8, &raw); ts = (int64_t *)raw;
        if (!bufs[B_TS]) goto error;
        bufs[B_TSTYPE] = new_bytes(n * 4, &raw); tstype = (int32_t *)raw;
        if (!bufs[B_TSTYPE]) goto error;
        bufs[B_PCODE] = new_bytes(n * 4, &raw); pcode = (int32_t *)raw;
        if (!bufs[B_PCODE]) goto error;
        for (i = 0; i < B_PLAST; i++)
            if (!bufs[i])
                goto error;
        topics = PyList_New(0);
        topic_index = PyDict_New();
        pairs = PyList_New(0);
        if (!topics || !topic_index || !pairs || pairmap_grow(&pm) < 0)
            goto error;

        /* Pass 2: fill the buffers. */
        koff[0] = voff[0] = 0;
        for (i = 0; i < n; i++) {
            const Fields *f = &fields[i];
            if (f->key) {
                Py_ssize_t len = PyBytes_GET_SIZE(f->key);
                memcpy(kdata + kpos, PyBytes_AS_STRING(f->key), (size_t)len);
                kpos += (int32_t)len;
                if (kvalid)
                    set_valid(kvalid, i);
            }
            koff[i + 1] = kpos;
            if (f->value) {
                Py_ssize_t len = PyBytes_GET_SIZE(f->value);
                memcpy(vdata + vpos, PyBytes_AS_STRING(f->value), (size_t)len);
                vpos += (int32_t)len;
                if (vvalid)
                    set_valid(vvalid, i);
            }
            voff[i + 1] = vpos;

            /* Topic code: consecutive records mostly share a topic (each
             * message holds its own str object, so compare contents). */
            if (f->topic != last_topic) {
                int same = 0;
                if (last_topic) {
                    same = PyUnicode_Compare(f->topic, last_topic);
                    if (same == -1 && PyErr_Occurred())
                        goto error;
                    same = same == 0;
                }
                if (!same) {
                    PyObject *code = PyDict_GetItemWithError(topic_index, f->topic);
                    if (code) {
                        last_tcode = (int32_t)PyLong_AsLong(code);
                    } else {
                        if (PyErr_Occurred())
                            goto error;
                        last_tcode = (int32_t)PyList_GET_SIZE(topics);
                        code = PyLong_FromLong(last_tcode);
                        if (!code)
                            goto error;
                        if (PyDict_SetItem(topic_index, f->topic, code) < 0 ||
                            PyList_Append(topics, f->topic) < 0) {
                            Py_DECREF(code);
                            goto error;
                        }
                        Py_DECREF(code);
                    }
                }
                last_topic = f->topic;
            }
            tcode[i] = last_tcode;
            part[i] = (int32_t)f->partition;
            off[i] = f->offset;
            ts[i] = f->timestamp * 1000; /* ms -> us */
            /* librdkafka: 0 none, 1 create, 2 append; Kafka/Spark: -1, 0, 1 */
            tstype[i] = (int32_t)(f->tstype - 1);

            {
                int64_t pkey = ((int64_t)last_tcode << 32) | (uint32_t)f->partition;
                if (pkey != last_pkey) {
                    Py_ssize_t slot = 0;
                    int32_t code = pairmap_find(&pm, pkey, &slot);
                    if (code < 0) {
                        PyObject *pair;
                        code = (int32_t)pm.len;
                        pm.keys[slot] = pkey;
                        pm.vals[slot] = code;
                        pm.len++;
                        if (pm.len * 2 > pm.cap && pairmap_grow(&pm) < 0)
                            goto error;
                        if (pm.len > pair_last_cap) {
                            Py_ssize_t cap = pair_last_cap ? pair_last_cap * 2 : 64;
                            int32_t *grown = PyMem_Realloc(pair_last, (size_t)cap * sizeof(int32_t));
                            if (!grown) {
                                PyErr_NoMemory();
                                goto error;
                            }
                            pair_last = grown;
                            pair_last_cap = cap;
                        }
                        pair = Py_BuildValue("(Oi)", last_topic, (int)f->partition);
                        if (!pair || PyList_Append(pairs, pair) < 0) {
                            Py_XDECREF(pair);
                            goto error;
                        }
                        Py_DECREF(pair);
                    }
                    last_pcode = code;
                    last_pkey = pkey;
                }
                pcode[i] = last_pcode;
                pair_last[last_pcode] = (int32_t)i;
            }
        }
        bufs[B_PLAST] = PyBytes_FromStringAndSize((const char *)pair_last, pm.len * 4);
        if (!bufs[B_PLAST])
            goto error;
    }

    out = Py_BuildValue("(OnOOOnOOOOOOOOOOO)", bufs[B_KVALID], key_nulls, bufs[B_KOFF],
                        bufs[B_KDATA], bufs[B_VVALID], value_nulls, bufs[B_VOFF], bufs[B_VDATA],
                        topics, bufs[B_TCODE], bufs[B_PART], bufs[B_OFF], bufs[B_TS],
                        bufs[B_TSTYPE], pairs, bufs[B_PCODE], bufs[B_PLAST]);
    goto done;

unsupported:
    out = Py_None;
    Py_INCREF(out);
    goto done;
error:
    out = NULL;
done:
    for (i = 0; i < B_COUNT; i++)
        Py_XDECREF(bufs[i]);
    Py_XDECREF(topics);
    Py_XDECREF(topic_index);
    Py_XDECREF(pairs);
    pairmap_free(&pm);
    PyMem_Free(pair_last);
    PyMem_Free(fields);
    owned_clear(&owned);
    Py_XDECREF(msgs);
    return out;
}

PyDoc_STRVAR(configure_doc,
"configure(message_type, getters)\n\n"
"The Message type and its accessors (topic, partition, offset, timestamp, key,\n"
"value, error), as unbound method descriptors.");

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *type, *seq;
    if (!PyArg_ParseTuple(args, "O!O!:configure", &PyType_Type, &type, &PyTuple_Type, &seq))
        return NULL;
    if (PyTuple_GET_SIZE(seq) != G_COUNT) {
        PyErr_Format(PyExc_ValueError, "expected %d getters", G_COUNT);
        return NULL;
    }
    for (int i = 0; i < G_COUNT; i++) {
        PyObject *g = PyTuple_GET_ITEM(seq, i);
        if (!PyCallable_Check(g)) {
            PyErr_SetString(PyExc_TypeError, "getters must be callable");
            return NULL;
        }
        Py_INCREF(g);
        Py_XSETREF(getters[i], g);
    }
    Py_INCREF(type);
    Py_XSETREF(message_type, (PyTypeObject *)type);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(check_layout_doc,
"check_layout() -> str | None\n\n"
"Why the configured Message type cannot be read directly (None if its size\n"
"matches the mirrored struct; the caller must still compare samples).");

static PyObject *check_layout(PyObject *self, PyObject *noargs) {
    if (!message_type)
        return PyUnicode_FromString("configure() was not called");
    if (message_type->tp_basicsize != (Py_ssize_t)sizeof(MessageMirror))
        return PyUnicode_FromFormat("%s is %zd bytes, the mirrored struct %zd",
                                    message_type->tp_name, message_type->tp_basicsize,
                                    (Py_ssize_t)sizeof(MessageMirror));
    if (message_type->tp_itemsize != 0)
        return PyUnicode_FromFormat("%s is variable-sized", message_type->tp_name);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"convert", convert, METH_VARARGS, convert_doc},
    {"configure", configure, METH_VARARGS, configure_doc},
    {"check_layout", check_layout, METH_NOARGS, check_layout_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_convert",
    .m_doc = "confluent_kafka Messages -> Arrow buffers (see multikafka/reader_agent/_cconvert.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__convert(void) { return PyModule_Create(&module); }
