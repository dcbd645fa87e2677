/* DTypeBase: what C needs of an element type (DLPack code and bits, item
 * size, kind, the NumPy / buffer / Arrow names of its zero-copy form), and
 * the registry that maps DLPack (code, bits) back to the dtype object. The
 * Python class bridge.dtype adds names, promotion and NumPy dtypes on top. */

#include "core.h"

#define MAX_CODE 32
#define MAX_BITS 128

static DTypeObject *by_dlpack[MAX_CODE][MAX_BITS + 1]; /* strong references */
/* Packed sub-byte types (lanes * bits == 8: one byte holds 8 / bits values),
 * by (code, bits). */
static DTypeObject *by_packed[MAX_CODE][8];

DTypeObject *bridge_dtype_from_dlpack(int code, int bits, int lanes) {
  if (code < 0 || code >= MAX_CODE || bits < 0 || bits > MAX_BITS) return NULL;
  if (lanes == 1) return by_dlpack[code][bits];
  if (bits > 0 && bits < 8 && lanes * bits == 8) return by_packed[code][bits];
  return NULL;
}

static int copy_name(char *dst, const char *src, const char *what) {
  if (strlen(src) >= 4) {
    PyErr_Format(PyExc_ValueError, "%s '%s' is too long", what, src);
    return -1;
  }
  strcpy(dst, src);
  return 0;
}

/* DTypeBase.__new__(cls, code, bits, itemsize, kind, signed, buffer_format,
 * typekind, arrow_format, lanes=1): a new dtype, registered by (code, bits,
 * lanes). lanes > 1 is a packed sub-byte type: one byte of lanes values of
 * `bits` bits (lanes * bits == 8, itemsize 1). Called once per dtype by
 * bridge.core.dtypes. */
static PyObject *dtype_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  int code, bits, itemsize, kind, is_signed, lanes = 1;
  const char *fmt, *typekind, *arrow;
  static char *kwlist[] = {"code", "bits", "itemsize", "kind", "signed", "buffer_format",
                           "typekind", "arrow_format", "lanes", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iiiipsss|i:DTypeBase", kwlist, &code, &bits,
                                   &itemsize, &kind, &is_signed, &fmt, &typekind, &arrow, &lanes))
    return NULL;
  if (code < 0 || code >= MAX_CODE || bits <= 0 || bits > MAX_BITS || itemsize <= 0 ||
      itemsize > 16 || kind < KIND_BOOL || kind > KIND_COMPLEX || strlen(typekind) > 1 ||
      (lanes != 1 && !(bits < 8 && lanes * bits == 8 && itemsize == 1))) {
    PyErr_SetString(PyExc_ValueError,
                    "DTypeBase: invalid code, bits, itemsize, kind, typekind or lanes (lanes > 1 only "
                    "for a packed sub-byte type: lanes * bits == 8)");
    return NULL;
  }
  DTypeObject **slot = lanes == 1 ? &by_dlpack[code][bits] : &by_packed[code][bits];
  if (*slot != NULL) {
    PyErr_Format(PyExc_ValueError, "a dtype with DLPack code %d, %d bits and %d lanes exists already",
                 code, bits, lanes);
    return NULL;
  }
  DTypeObject *self = (DTypeObject *)type->tp_alloc(type, 0);
  if (self == NULL) return NULL;
  self->code = (uint8_t)code;
  self->bits = (uint8_t)bits;
  self->lanes = (uint16_t)lanes;
  self->itemsize = itemsize;
  self->kind = (uint8_t)kind;
  self->is_signed = (uint8_t)is_signed;
  self->typekind = typekind[0];
  if (copy_name(self->buffer_format, fmt, "buffer format") < 0 ||
      copy_name(self->arrow_format, arrow, "Arrow format") < 0) {
    Py_DECREF(self);
    return NULL;
  }
  *slot = (DTypeObject *)Py_NewRef(self);
  return (PyObject *)self;
}

static PyObject *dtype_get_itemsize(DTypeObject *self, void *c) {
  (void)c;
  return PyLong_FromLong(self->itemsize);
}

static PyObject *dtype_get_dlpack(DTypeObject *self, void *c) {
  (void)c;
  return Py_BuildValue("(iii)", self->code, self->bits, self->lanes);
}

static PyObject *dtype_get_arrow_format(DTypeObject *self, void *c) {
  (void)c;
  if (self->arrow_format[0] == 0) Py_RETURN_NONE;
  return PyUnicode_FromString(self->arrow_format);
}

static PyObject *dtype_get_buffer_format(DTypeObject *self, void *c) {
  (void)c;
  if (self->buffer_format[0] == 0) Py_RETURN_NONE;
  return PyUnicode_FromString(self->buffer_format);
}

static PyObject *dtype_get_kind(DTypeObject *self, void *c) {
  (void)c;
  return PyLong_FromLong(self->kind);
}

static PyObject *dtype_get_signed(DTypeObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(self->is_signed);
}

static PyGetSetDef dtype_getset[] = {
    {"_kind", (getter)dtype_get_kind, NULL, "0 bool, 1 integer, 2 floating, 3 complex.", NULL},
    {"_signed", (getter)dtype_get_signed, NULL, "Whether the type holds negative values.", NULL},
    {"itemsize", (getter)dtype_get_itemsize, NULL, "Bytes one element occupies in memory.", NULL},
    {"dlpack", (getter)dtype_get_dlpack, NULL,
     "(code, bits, lanes) as in DLPack's DLDataType (sub-byte types report their logical bits; "
     "a packed type such as float4_e2m1fn_x2 its values per element as lanes).",
     NULL},
    {"arrow_format", (getter)dtype_get_arrow_format, NULL,
     "Arrow C data format of the zero-copy Arrow type, or None when Arrow has none.", NULL},
    {"buffer_format", (getter)dtype_get_buffer_format, NULL,
     "PEP 3118 format of the buffer export, or None when the type has none.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject BridgeDType_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bridge._C.DTypeBase",
    .tp_basicsize = sizeof(DTypeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "DTypeBase(code, bits, itemsize, kind, signed, buffer_format, typekind, "
              "arrow_format, lanes=1)\n--\n\nThe C part of bridge.dtype.",
    .tp_new = dtype_new,
    .tp_getset = dtype_getset,
};
