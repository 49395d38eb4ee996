/* The guard's per-chunk hot path in C: the HTTP body send and the guarded stream's runner.
 *
 * Why by hand: no library counts a chunk on its way through an ASGI send or an async iterator,
 * and in Python each layer costs a frame per chunk (~1 us together on a 2-core VM, against a
 * 300 ns budget; see docs/benchmarks.md). These two types do only the counting and the hand-over;
 * every rare path (the end of a stream, an error, a cancel, a send to a server whose send is no
 * coroutine) calls back into Python, where the pure-Python implementation is the reference and
 * the fallback when this module cannot be built (llm_guard_sdk/asgi/http.py, llm_guard_sdk/stream.py).
 *
 * Both count into a Traffic object (two C integers: no int object made per chunk) that the
 * session (session.out) or the stream (stream.traffic) owns and reads as ints; the flags they
 * check are read straight from the Python objects' __slots__ (offsets resolved once, by name,
 * from the member descriptors of the object's type).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* ---- slots of Python objects, by offset ------------------------------------------------ */

static int
slot_offset(PyObject *obj, const char *name, Py_ssize_t *offset)
{
    PyObject *descr = PyObject_GetAttrString((PyObject *)Py_TYPE(obj), name);
    if (descr == NULL) {
        return -1;
    }
    if (!Py_IS_TYPE(descr, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
        Py_DECREF(descr);
        PyErr_Format(PyExc_TypeError, "%s.%s must be a __slots__ attribute",
                     Py_TYPE(obj)->tp_name, name);
        return -1;
    }
    *offset = ((PyMemberDescrObject *)descr)->d_member->offset;
    Py_DECREF(descr);
    return 0;
}

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static void
slot_set(PyObject *obj, Py_ssize_t off, PyObject *value)
{
    PyObject *old = SLOT(obj, off);
    Py_INCREF(value);
    SLOT(obj, off) = value;
    Py_XDECREF(old);
}

/* A chunk's size as default_sizer measures it: len() of str/bytes/bytearray/memoryview, else 0. */
static Py_ssize_t
chunk_size(PyObject *item)
{
    if (PyBytes_CheckExact(item)) {
        return PyBytes_GET_SIZE(item);
    }
    if (PyUnicode_CheckExact(item)) {
        return PyUnicode_GET_LENGTH(item);
    }
    if (PyBytes_Check(item) || PyUnicode_Check(item) || PyByteArray_Check(item) ||
            PyMemoryView_Check(item)) {
        return PyObject_Size(item);
    }
    return 0;
}

/* Raise StopIteration(value) as a generator's return does (tuples and exceptions wrapped). */
static void
set_stop_iteration(PyObject *value)
{
    _PyGen_SetStopIterationValue(value);
}

/* ---- Traffic: a pair of counters the hot path adds to without making an int per chunk ------ */

typedef struct {
    PyObject_HEAD
    long long chunks;
    long long bytes;
} Traffic;

static PyTypeObject Traffic_Type;

static PyObject *
traffic_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Traffic() takes no arguments");
        return NULL;
    }
    return type->tp_alloc(type, 0);  /* zeroed: 0 chunks, 0 bytes */
}

static int
traffic_set(long long *field, PyObject *value)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a traffic counter cannot be deleted");
        return -1;
    }
    if (!PyLong_Check(value) || PyBool_Check(value)) {
        PyErr_Format(PyExc_TypeError, "a traffic counter is an int, not %.100s",
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    *field = v;
    return 0;
}

static PyObject *
traffic_get_chunks(Traffic *self, void *closure)
{
    return PyLong_FromLongLong(self->chunks);
}

static int
traffic_set_chunks(Traffic *self, PyObject *value, void *closure)
{
    return traffic_set(&self->chunks, value);
}

static PyObject *
traffic_get_bytes(Traffic *self, void *closure)
{
    return PyLong_FromLongLong(self->bytes);
}

static int
traffic_set_bytes(Traffic *self, PyObject *value, void *closure)
{
    return traffic_set(&self->bytes, value);
}

static PyGetSetDef traffic_getset[] = {
    {"chunks", (getter)traffic_get_chunks, (setter)traffic_set_chunks, "Chunks counted.", NULL},
    {"bytes", (getter)traffic_get_bytes, (setter)traffic_set_bytes, "Bytes counted.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject Traffic_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "llm_guard_sdk._hotpath.Traffic",
    .tp_doc = "Chunks and bytes, counted in C (read and set as ints from Python).",
    .tp_basicsize = sizeof(Traffic),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = traffic_new,
    .tp_getset = traffic_getset,
};

static int
as_traffic(PyObject *obj, Traffic **out)
{
    if (!Py_IS_TYPE(obj, &Traffic_Type)) {
        PyErr_Format(PyExc_TypeError, "traffic must be a _hotpath.Traffic, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *out = (Traffic *)obj;
    return 0;
}

/* ---- BodySend: HttpConnection.send for body chunks ------------------------------------ */

static PyObject *str_type, *str_body, *str_more_body, *str_body_type;

typedef struct {
    PyObject_HEAD
    PyObject *conn;      /* the HttpConnection */
    Traffic *traffic;    /* its session's outbound traffic (session.out) */
    PyObject *send;      /* the server's send */
    PyObject *other;     /* conn.send, the Python reference: any message but a body chunk
                            in a plain dict before the response was ended by the guard */
    PyObject *watched;   /* conn._watched: a body send whose result is no coroutine */
    Py_ssize_t off_terminated, off_complete, off_body_send;
    vectorcallfunc vectorcall;
} BodySend;

static int
is_body_type(PyObject *kind)
{
    if (kind == str_body_type) {
        return 1;
    }
    return kind != NULL && PyUnicode_CheckExact(kind) &&
        PyUnicode_GET_LENGTH(kind) == 18 && PyUnicode_KIND(kind) == PyUnicode_1BYTE_KIND &&
        memcmp(PyUnicode_DATA(kind), "http.response.body", 18) == 0;
}

static PyObject *
body_send_call(BodySend *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "send() takes exactly one message");
        return NULL;
    }
    if (self->conn == NULL) {  /* cleared by the garbage collector (a finalizer's call) */
        PyErr_SetString(PyExc_RuntimeError, "send() of a connection that is gone");
        return NULL;
    }
    PyObject *message = args[0];
    if (!PyDict_CheckExact(message) || SLOT(self->conn, self->off_terminated) != Py_False) {
        return PyObject_Vectorcall(self->other, args, 1, NULL);
    }
    PyObject *kind = PyDict_GetItemWithError(message, str_type);
    if (!is_body_type(kind)) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        return PyObject_Vectorcall(self->other, args, 1, NULL);
    }
    PyObject *body = PyDict_GetItemWithError(message, str_body);
    Py_ssize_t size = 0;
    if (body != NULL) {
        size = PyBytes_CheckExact(body) ? PyBytes_GET_SIZE(body) : PyObject_Size(body);
        if (size < 0) {
            return NULL;
        }
    }
    else if (PyErr_Occurred()) {
        return NULL;
    }
    self->traffic->bytes += size;
    self->traffic->chunks += 1;
    PyObject *more = PyDict_GetItemWithError(message, str_more_body);
    int more_body = 0;
    if (more == Py_True) {
        more_body = 1;
    }
    else if (more != NULL) {
        more_body = PyObject_IsTrue(more);
        if (more_body < 0) {
            return NULL;
        }
    }
    else if (PyErr_Occurred()) {
        return NULL;
    }
    if (!more_body) {
        slot_set(self->conn, self->off_complete, Py_True);
    }
    PyObject *sent = PyObject_Vectorcall(self->send, args, 1, NULL);
    if (sent == NULL) {
        return NULL;
    }
    if (!PyCoro_CheckExact(sent)) {
        PyObject *watched = PyObject_CallOneArg(self->watched, sent);
        Py_DECREF(sent);
        return watched;
    }
    slot_set(self->conn, self->off_body_send, sent);
    return sent;
}

static PyObject *
body_send_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"conn", "traffic", "send", "other", "watched", NULL};
    PyObject *conn, *traffic, *send, *other, *watched;
    Traffic *counters;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO:BodySend", kwlist,
                                     &conn, &traffic, &send, &other, &watched) ||
            as_traffic(traffic, &counters) < 0) {
        return NULL;
    }
    BodySend *self = (BodySend *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = (vectorcallfunc)body_send_call;
    if (slot_offset(conn, "terminated", &self->off_terminated) < 0 ||
            slot_offset(conn, "response_complete", &self->off_complete) < 0 ||
            slot_offset(conn, "pending_send", &self->off_body_send) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    if (SLOT(conn, self->off_terminated) == NULL || SLOT(conn, self->off_complete) == NULL) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_AttributeError, "BodySend: counters must be set before");
        return NULL;
    }
    Py_INCREF(conn); self->conn = conn;
    Py_INCREF(counters); self->traffic = counters;
    Py_INCREF(send); self->send = send;
    Py_INCREF(other); self->other = other;
    Py_INCREF(watched); self->watched = watched;
    return (PyObject *)self;
}

static int
body_send_traverse(BodySend *self, visitproc visit, void *arg)
{
    Py_VISIT(self->conn);
    Py_VISIT(self->traffic);
    Py_VISIT(self->send);
    Py_VISIT(self->other);
    Py_VISIT(self->watched);
    return 0;
}

static int
body_send_clear(BodySend *self)
{
    Py_CLEAR(self->conn);
    Py_CLEAR(self->traffic);
    Py_CLEAR(self->send);
    Py_CLEAR(self->other);
    Py_CLEAR(self->watched);
    return 0;
}

static void
body_send_dealloc(BodySend *self)
{
    PyObject_GC_UnTrack(self);
    body_send_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
body_send_tp_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return PyVectorcall_Call(self, args, kwargs);
}

static PyTypeObject BodySend_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "llm_guard_sdk._hotpath.BodySend",
    .tp_doc = "An HTTP connection's send: counts body chunks, returns the server's awaitable.",
    .tp_basicsize = sizeof(BodySend),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(BodySend, vectorcall),
    .tp_call = body_send_tp_call,
    .tp_new = body_send_new,
    .tp_traverse = (traverseproc)body_send_traverse,
    .tp_clear = (inquiry)body_send_clear,
    .tp_dealloc = (destructor)body_send_dealloc,
};

/* ---- ChunkRunner: a GuardedStream's iterator ------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *stream;    /* the GuardedStream */
    Traffic *traffic;    /* its counters (stream.traffic) */
    PyObject *source;    /* its source iterator */
    PyObject *loop;      /* the running loop, or None: no task to note */
    PyObject *tasks;     /* asyncio's dict of current tasks by loop, or current_task */
    PyObject *ended;     /* stream._source_ended(exc, task) -> coroutine */
    PyObject *late;      /* stream._late_chunk(task) -> coroutine */
    PyObject *stopped;   /* stream._after_stop() -> coroutine */
    PyObject *inner;     /* the source's awaitable of the chunk in flight */
    PyObject *delegate;  /* a Python coroutine ending this __anext__ */
    PyObject *task;      /* the task awaiting the chunk in flight */
    Py_ssize_t off_waiter, off_stopping;
} ChunkRunner;

static PyTypeObject ChunkRunner_Type;

/* The iterator to drive for an awaitable, as `await` takes it. */
static PyObject *
awaitable_iter(PyObject *aw)
{
    if (PyCoro_CheckExact(aw)) {
        Py_INCREF(aw);
        return aw;
    }
    PyAsyncMethods *am = Py_TYPE(aw)->tp_as_async;
    if (am == NULL || am->am_await == NULL) {
        PyErr_Format(PyExc_TypeError, "__anext__ returned a non-awaitable %.100s",
                     Py_TYPE(aw)->tp_name);
        return NULL;
    }
    PyObject *it = am->am_await(aw);
    if (it != NULL && !PyIter_Check(it) && !PyCoro_CheckExact(it)) {
        PyErr_Format(PyExc_TypeError, "__await__() returned non-iterator %.100s",
                     Py_TYPE(it)->tp_name);
        Py_CLEAR(it);
    }
    return it;
}

/* The raised exception, normalized, with its traceback; cleared from the thread state. */
static PyObject *
fetch_exception(void)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value == NULL) {
        value = Py_None;
        Py_INCREF(value);
    }
    else if (tb != NULL) {
        PyException_SetTraceback(value, tb);
    }
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
}

static PySendResult
runner_delegate_step(ChunkRunner *self, PySendResult status, PyObject *res, PyObject **result)
{
    if (status != PYGEN_NEXT) {
        Py_CLEAR(self->delegate);
    }
    *result = res;
    return status;
}

/* Start the Python coroutine `coro` that ends this __anext__, and take its first step. */
static PySendResult
runner_start_delegate(ChunkRunner *self, PyObject *coro, PyObject **result)
{
    if (coro == NULL) {
        *result = NULL;
        return PYGEN_ERROR;
    }
    self->delegate = coro;
    PyObject *res;
    PySendResult status = PyIter_Send(coro, Py_None, &res);
    return runner_delegate_step(self, status, res, result);
}

/* What the source's awaitable did: pass a suspension through, count a chunk, or end. */
static PySendResult
runner_inner_step(ChunkRunner *self, PySendResult status, PyObject *res, PyObject **result)
{
    if (status == PYGEN_NEXT) {
        *result = res;
        return PYGEN_NEXT;
    }
    Py_CLEAR(self->inner);
    slot_set(self->stream, self->off_waiter, Py_None);
    PyObject *task = self->task;  /* owned here now */
    self->task = NULL;
    if (task == NULL) {
        task = Py_None;
        Py_INCREF(task);
    }
    if (status == PYGEN_RETURN) {
        if (SLOT(self->stream, self->off_stopping) != Py_False) {
            /* Closed while the chunk was in flight: drop it, end in Python. */
            Py_DECREF(res);
            PyObject *coro = PyObject_CallOneArg(self->late, task);
            Py_DECREF(task);
            return runner_start_delegate(self, coro, result);
        }
        Py_DECREF(task);
        Py_ssize_t size = chunk_size(res);
        if (size < 0) {
            Py_DECREF(res);
            *result = NULL;
            return PYGEN_ERROR;
        }
        self->traffic->chunks += 1;
        self->traffic->bytes += size;
        *result = res;
        return PYGEN_RETURN;
    }
    /* The source raised (StopAsyncIteration, a cancel, an error): end in Python. */
    PyObject *value = fetch_exception();
    PyObject *coro = PyObject_CallFunctionObjArgs(self->ended, value, task, NULL);
    Py_DECREF(value);
    Py_DECREF(task);
    return runner_start_delegate(self, coro, result);
}

static PySendResult
runner_am_send(ChunkRunner *self, PyObject *arg, PyObject **result)
{
    PyObject *res;
    if (self->delegate != NULL) {
        PySendResult status = PyIter_Send(self->delegate, arg, &res);
        return runner_delegate_step(self, status, res, result);
    }
    if (self->inner == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited __anext__()");
        *result = NULL;
        return PYGEN_ERROR;
    }
    PySendResult status = PyIter_Send(self->inner, arg, &res);
    return runner_inner_step(self, status, res, result);
}

/* The Python-level face of am_send: a return becomes StopIteration(value). */
static PyObject *
runner_result(PySendResult status, PyObject *res)
{
    if (status == PYGEN_NEXT) {
        return res;
    }
    if (status == PYGEN_RETURN) {
        set_stop_iteration(res);
        Py_DECREF(res);
    }
    return NULL;
}

static PyObject *
runner_iternext(ChunkRunner *self)
{
    PyObject *res;
    PySendResult status = runner_am_send(self, Py_None, &res);
    return runner_result(status, res);
}

static PyObject *
runner_send(ChunkRunner *self, PyObject *arg)
{
    PyObject *res;
    PySendResult status = runner_am_send(self, arg, &res);
    return runner_result(status, res);
}

/* A StopIteration raised by a throw()/close() of the target: its value, as PyIter_Send does. */
static PySendResult
fetch_return(PyObject *res, PyObject **value)
{
    if (res != NULL) {
        *value = res;
        return PYGEN_NEXT;
    }
    if (PyErr_ExceptionMatches(PyExc_StopIteration)) {
        PyObject *type, *exc, *tb;
        PyErr_Fetch(&type, &exc, &tb);
        PyErr_NormalizeException(&type, &exc, &tb);
        PyObject *v = exc != NULL ? ((PyStopIterationObject *)exc)->value : Py_None;
        Py_INCREF(v);
        Py_XDECREF(type);
        Py_XDECREF(exc);
        Py_XDECREF(tb);
        *value = v;
        return PYGEN_RETURN;
    }
    *value = NULL;
    return PYGEN_ERROR;
}

static PyObject *
runner_throw(ChunkRunner *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *target = self->delegate != NULL ? self->delegate : self->inner;
    if (target == NULL) {
        /* Nothing in flight: raise it here, as an unstarted awaitable does. */
        PyObject *type = nargs > 0 ? args[0] : Py_None;
        PyObject *value = nargs > 1 ? args[1] : Py_None;
        if (PyExceptionInstance_Check(type)) {
            PyErr_SetObject((PyObject *)Py_TYPE(type), type);
        }
        else if (PyExceptionClass_Check(type)) {
            PyErr_SetObject(type, value);
        }
        else {
            PyErr_SetString(PyExc_TypeError, "throw() needs an exception");
        }
        return NULL;
    }
    PyObject *method = PyObject_GetAttrString(target, "throw");
    if (method == NULL) {
        return NULL;
    }
    PyObject *res = PyObject_Vectorcall(method, args, nargs, NULL);
    Py_DECREF(method);
    PyObject *value;
    PySendResult status = fetch_return(res, &value);
    if (self->delegate != NULL) {
        status = runner_delegate_step(self, status, value, &value);
    }
    else {
        status = runner_inner_step(self, status, value, &value);
    }
    return runner_result(status, value);
}

static PyObject *
runner_close(ChunkRunner *self, PyObject *unused)
{
    PyObject *target = self->delegate != NULL ? self->delegate : self->inner;
    if (target != NULL) {
        Py_INCREF(target);
        Py_CLEAR(self->delegate);
        Py_CLEAR(self->inner);
        Py_CLEAR(self->task);
        slot_set(self->stream, self->off_waiter, Py_None);
        PyObject *res = PyObject_CallMethod(target, "close", NULL);
        Py_DECREF(target);
        if (res == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
                return NULL;
            }
            PyErr_Clear();
        }
        Py_XDECREF(res);
    }
    Py_RETURN_NONE;
}

static PyObject *
runner_anext(ChunkRunner *self)
{
    if (self->stream == NULL) {  /* cleared by the garbage collector (a finalizer's call) */
        PyErr_SetString(PyExc_RuntimeError, "anext() of a stream that is gone");
        return NULL;
    }
    if (self->inner != NULL || self->delegate != NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "anext(): asynchronous generator is already running");
        return NULL;
    }
    if (SLOT(self->stream, self->off_stopping) != Py_False) {
        self->delegate = PyObject_CallNoArgs(self->stopped);
        if (self->delegate == NULL) {
            return NULL;
        }
        Py_INCREF(self);
        return (PyObject *)self;
    }
    PyObject *task = NULL;  /* owned */
    if (self->loop != Py_None) {
        if (PyDict_CheckExact(self->tasks)) {  /* 3.11: asyncio's dict, one lookup */
            task = PyDict_GetItemWithError(self->tasks, self->loop);
            if (task == NULL && PyErr_Occurred()) {
                return NULL;
            }
            Py_XINCREF(task);
        }
        else {  /* asyncio.current_task, in C from 3.12 */
            task = PyObject_CallOneArg(self->tasks, self->loop);
            if (task == NULL) {
                return NULL;
            }
            if (task == Py_None) {
                Py_CLEAR(task);
            }
        }
    }
    PyAsyncMethods *am = Py_TYPE(self->source)->tp_as_async;
    PyObject *aw = (am != NULL && am->am_anext != NULL)
        ? am->am_anext(self->source)
        : PyObject_CallMethod(self->source, "__anext__", NULL);
    PyObject *it = NULL;
    if (aw != NULL) {
        it = awaitable_iter(aw);
        Py_DECREF(aw);
    }
    if (it == NULL) {
        /* The source failed before awaiting (e.g. an __anext__ that raises at once): ended
         * in Python like any other end, when this __anext__ is awaited. */
        PyObject *value = fetch_exception();
        PyObject *coro = PyObject_CallFunctionObjArgs(self->ended, value,
                                                      task != NULL ? task : Py_None, NULL);
        Py_DECREF(value);
        Py_XDECREF(task);
        if (coro == NULL) {
            return NULL;
        }
        self->delegate = coro;
        Py_INCREF(self);
        return (PyObject *)self;
    }
    self->inner = it;
    Py_XSETREF(self->task, task);
    slot_set(self->stream, self->off_waiter, task != NULL ? task : Py_None);
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *
runner_self(PyObject *self)
{
    Py_INCREF(self);
    return self;
}

static PyObject *
runner_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"stream", "traffic", "source", "loop", "tasks", NULL};
    PyObject *stream, *traffic, *source, *loop, *tasks;
    Traffic *counters;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO:ChunkRunner", kwlist,
                                     &stream, &traffic, &source, &loop, &tasks) ||
            as_traffic(traffic, &counters) < 0) {
        return NULL;
    }
    if (loop != Py_None && !PyDict_CheckExact(tasks) && !PyCallable_Check(tasks)) {
        PyErr_SetString(PyExc_TypeError, "tasks must be a dict or current_task");
        return NULL;
    }
    ChunkRunner *self = (ChunkRunner *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    if (slot_offset(stream, "_waiter", &self->off_waiter) < 0 ||
            slot_offset(stream, "_stopping", &self->off_stopping) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    Py_INCREF(stream); self->stream = stream;
    Py_INCREF(counters); self->traffic = counters;
    Py_INCREF(source); self->source = source;
    Py_INCREF(loop); self->loop = loop;
    Py_INCREF(tasks); self->tasks = tasks;
    self->ended = PyObject_GetAttrString(stream, "_source_ended");
    self->late = PyObject_GetAttrString(stream, "_late_chunk");
    self->stopped = PyObject_GetAttrString(stream, "_after_stop");
    if (self->ended == NULL || self->late == NULL || self->stopped == NULL ||
            SLOT(stream, self->off_stopping) == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_AttributeError, "ChunkRunner: stream counters not set");
        }
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
runner_traverse(ChunkRunner *self, visitproc visit, void *arg)
{
    Py_VISIT(self->stream);
    Py_VISIT(self->traffic);
    Py_VISIT(self->source);
    Py_VISIT(self->loop);
    Py_VISIT(self->tasks);
    Py_VISIT(self->ended);
    Py_VISIT(self->late);
    Py_VISIT(self->stopped);
    Py_VISIT(self->inner);
    Py_VISIT(self->delegate);
    Py_VISIT(self->task);
    return 0;
}

static int
runner_clear(ChunkRunner *self)
{
    Py_CLEAR(self->stream);
    Py_CLEAR(self->traffic);
    Py_CLEAR(self->source);
    Py_CLEAR(self->loop);
    Py_CLEAR(self->tasks);
    Py_CLEAR(self->ended);
    Py_CLEAR(self->late);
    Py_CLEAR(self->stopped);
    Py_CLEAR(self->inner);
    Py_CLEAR(self->delegate);
    Py_CLEAR(self->task);
    return 0;
}

static void
runner_dealloc(ChunkRunner *self)
{
    PyObject_GC_UnTrack(self);
    runner_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
runner_running(ChunkRunner *self, void *closure)
{
    return PyBool_FromLong(self->inner != NULL || self->delegate != NULL);
}

static PyMethodDef runner_methods[] = {
    {"send", (PyCFunction)runner_send, METH_O, "Resume the chunk in flight."},
    {"throw", (PyCFunction)(void (*)(void))runner_throw, METH_FASTCALL,
     "Raise into the chunk in flight (a cancel of the consuming task arrives here)."},
    {"close", (PyCFunction)runner_close, METH_NOARGS, "Close the chunk in flight."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef runner_getset[] = {
    {"running", (getter)runner_running, NULL, "True while an __anext__ is in flight.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyAsyncMethods runner_as_async = {
    .am_await = (unaryfunc)runner_self,
    .am_aiter = (unaryfunc)runner_self,
    .am_anext = (unaryfunc)runner_anext,
    .am_send = (sendfunc)runner_am_send,
};

static PyTypeObject ChunkRunner_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "llm_guard_sdk._hotpath.ChunkRunner",
    .tp_doc = "A GuardedStream's iterator: counts each chunk, hands rare paths to Python.",
    .tp_basicsize = sizeof(ChunkRunner),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = runner_new,
    .tp_traverse = (traverseproc)runner_traverse,
    .tp_clear = (inquiry)runner_clear,
    .tp_dealloc = (destructor)runner_dealloc,
    .tp_as_async = &runner_as_async,
    .tp_iter = (getiterfunc)runner_self,
    .tp_iternext = (iternextfunc)runner_iternext,
    .tp_methods = runner_methods,
    .tp_getset = runner_getset,
};

/* ---- module ---------------------------------------------------------------------------- */

static struct PyModuleDef hotpath_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "llm_guard_sdk._hotpath",
    .m_doc = "The per-chunk hot path in C (optional; the pure-Python code is the fallback).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__hotpath(void)
{
    str_type = PyUnicode_InternFromString("type");
    str_body = PyUnicode_InternFromString("body");
    str_more_body = PyUnicode_InternFromString("more_body");
    str_body_type = PyUnicode_InternFromString("http.response.body");
    if (str_type == NULL || str_body == NULL || str_more_body == NULL ||
            str_body_type == NULL) {
        return NULL;
    }
    if (PyType_Ready(&Traffic_Type) < 0 || PyType_Ready(&BodySend_Type) < 0 ||
            PyType_Ready(&ChunkRunner_Type) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&hotpath_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "Traffic", (PyObject *)&Traffic_Type) < 0 ||
            PyModule_AddObjectRef(module, "BodySend", (PyObject *)&BodySend_Type) < 0 ||
            PyModule_AddObjectRef(module, "ChunkRunner", (PyObject *)&ChunkRunner_Type) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
