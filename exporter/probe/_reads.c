/* The probe's paced socket reads in C: what stamped.py's SocketReads does per read, without the
 * interpreter.
 *
 * Why: at a hundred streams a Python client spends most of its CPU per chunk in the path from the socket
 * to the kept bytes (epoll, recvmsg with its ancillary stamp, the stamp's arithmetic, the HTTP framing,
 * the reader's bookkeeping), each a few Python calls. Here one call reads every ready socket.
 *
 * What it does, and nothing more (stamped.py and http.py say why each step is as it is):
 *   - one epoll set for the sockets; read_ready() reads every ready one once with recvmsg;
 *   - a read's stamp is the kernel's receive time (SCM_TIMESTAMPNS) mapped onto the monotonic clock
 *     by the offset it is given, or the monotonic clock read again when the kernel gave none, one later
 *     than the present (bytes that came while this wake-up was reading are later than its `now`,
 *     rightly), or one impossibly early: by more than `early_by` before the last complete poll of the
 *     set, when that poll saw the socket and its last read took all there was (a lost packet's
 *     retransmission takes the stamp of the packets that waited for it; such reads are counted, per
 *     socket too: socket_reads.early_stamp);
 *     never before the socket's previous stamp (socket_reads.monotonic_stamp, the same arithmetic);
 *   - a socket may be put in "keep" mode by http.py once its HTTP parser is known to sit between two
 *     chunks of a chunked body and its reader keeps reads for later decoding (reader.py). Then a read
 *     that is exactly one whole HTTP chunk `<hex>\r\n<data>\r\n` (no extension, not the last chunk)
 *     whose data is one lone SSE event `data: <event data>\n\n` (one line, no CR: the shape of
 *     sse.lone_payload) of at most `max_data` bytes, holding none of the reader's end markers, is kept
 *     here: (stamp, event data) appended to the reader's list, the stamp written to the stream's
 *     `last_read`, and `due()` called once the list holds `due_at` reads. The parser is not told: it
 *     stays between two chunks, as it was. (The reader turns the mode on only when its SSE decoder
 *     will be clean before the next read, so such a read is one whole event.) When the reader gave
 *     a template (a list of two bytes, [prefix, suffix]: chunk_shapes.plain_template) and the event
 *     data is the prefix, at least one byte of JSON string content with no quote, backslash or control
 *     character, then the suffix, the item kept is (stamp, that content as str) instead: the text of
 *     a plain chunk, with no JSON decoded for it. Content that is not UTF-8 is kept as data, for the
 *     reader's decoder to judge. The reader may change the template's items between reads.
 *   - any other read goes to `received(stamp, bytes)`, as stamped.py would hand it, and ends keep mode
 *     (http.py turns it on again when the parser is between chunks once more); a closed socket or an
 *     error goes to `lose(None | OSError)`.
 *   - the gaps of streams being kept: for every read of a socket in keep mode (kept or not, so reads that
 *     came together count too), the time since that socket's previous read, when it is at least
 *     `gap_floor`; take_gaps() returns how many there were and the shortest, and starts counting
 *     afresh. socket_reads.py paces its reads by them (``next_pace``).
 * Callbacks may add or remove sockets, so no pointer into the table is held across one.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_EVENTS 1024
#define MAX_FD (1 << 24) /* far above any RLIMIT_NOFILE in use; the table grows to the largest fd */
#define MAX_CHUNK_HEX 7 /* a kept chunk is at most 0xfffffff bytes; longer sizes go to the parser */

typedef struct {
    PyObject *received; /* NULL: the slot is free */
    PyObject *lose;
    double last_stamp;
    double added;  /* when it joined the set: a poll before saw nothing of it */
    int undrained; /* its last read filled the buffer: more may have waited */
    Py_ssize_t early; /* its reads whose kernel stamp was impossibly early, stamped when read instead */
    /* keep mode (kept NULL: off) */
    PyObject *kept;
    PyObject *state;
    PyObject *due;
    PyObject *markers; /* tuple of bytes */
    PyObject *template; /* NULL, or a list that holds [prefix, suffix] while the reader has one */
    Py_ssize_t due_at;
    Py_ssize_t max_data;
} Entry;

typedef struct {
    PyObject_HEAD
    int epfd;
    int timestamp_type;
    Entry *entries; /* indexed by file descriptor */
    int capacity;
    char *buffer;
    Py_ssize_t buffer_size;
    PyObject *last_read_name;
    double gap_floor; /* shorter gaps are a server's own bursts, which no pace separates */
    double early_by;  /* a stamp earlier than its socket could be read by more is not used */
    Py_ssize_t gaps;  /* since the last take_gaps() */
    double shortest_gap;
    double waited; /* the longest a read of the last read_ready() waited: its `now` minus its stamp */
    double polled; /* the `now` of the last read_ready(): its poll found the others with nothing */
} Reads;

/* Clearing moves the references out of the entry before releasing any: a release may run a finalizer
 * that calls back into this object and moves the table, so `e` is not touched after the first. */
static void entry_unkeep(Entry *e) {
    PyObject *kept = e->kept, *state = e->state, *due = e->due, *markers = e->markers;
    PyObject *template = e->template;
    e->kept = e->state = e->due = e->markers = e->template = NULL;
    Py_XDECREF(kept);
    Py_XDECREF(state);
    Py_XDECREF(due);
    Py_XDECREF(markers);
    Py_XDECREF(template);
}

static void entry_clear(Entry *e) {
    PyObject *received = e->received, *lose = e->lose;
    PyObject *kept = e->kept, *state = e->state, *due = e->due, *markers = e->markers;
    PyObject *template = e->template;
    memset(e, 0, sizeof(*e));
    Py_XDECREF(received);
    Py_XDECREF(lose);
    Py_XDECREF(kept);
    Py_XDECREF(state);
    Py_XDECREF(due);
    Py_XDECREF(markers);
    Py_XDECREF(template);
}

static int fd_of(PyObject *arg) {
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred()) return -2;
    return fd < 0 || fd > 0x7fffffff ? -1 : (int)fd;
}

static Entry *entry_of(Reads *self, int fd) {
    if (fd < 0 || fd >= self->capacity || self->entries[fd].received == NULL) {
        return NULL;
    }
    return &self->entries[fd];
}

static int Reads_init(Reads *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"timestamp_type", "buffer_size", "gap_floor", "early_by", NULL};
    Py_ssize_t buffer_size = 256 * 1024;
    double gap_floor = 0.001, early_by = 0.010;
    if (self->epfd >= 0 || self->buffer != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Reads is initialised already");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|ndd", kwlist, &self->timestamp_type, &buffer_size,
                                     &gap_floor, &early_by)) {
        return -1;
    }
    self->gap_floor = gap_floor;
    self->early_by = early_by;
    self->shortest_gap = Py_HUGE_VAL;
    if (buffer_size <= 0) {
        PyErr_SetString(PyExc_ValueError, "buffer_size must be positive");
        return -1;
    }
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (self->epfd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->buffer = PyMem_Malloc((size_t)buffer_size);
    if (self->buffer == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->buffer_size = buffer_size;
    self->last_read_name = PyUnicode_InternFromString("last_read");
    return self->last_read_name == NULL ? -1 : 0;
}

static PyObject *Reads_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Reads *self = (Reads *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->epfd = -1;
    }
    return (PyObject *)self;
}

static void Reads_close_fd(Reads *self) {
    if (self->epfd >= 0) {
        close(self->epfd);
        self->epfd = -1;
    }
}

static int Reads_traverse(Reads *self, visitproc visit, void *arg) {
    for (int fd = 0; fd < self->capacity; fd++) {
        Entry *e = &self->entries[fd];
        Py_VISIT(e->received);
        Py_VISIT(e->lose);
        Py_VISIT(e->kept);
        Py_VISIT(e->state);
        Py_VISIT(e->due);
        Py_VISIT(e->markers);
        Py_VISIT(e->template);
    }
    return 0;
}

static int Reads_clear(Reads *self) {
    for (int fd = 0; fd < self->capacity; fd++) {
        entry_clear(&self->entries[fd]);
    }
    return 0;
}

static void Reads_dealloc(Reads *self) {
    PyObject_GC_UnTrack(self);
    Reads_clear(self);
    Reads_close_fd(self);
    PyMem_Free(self->entries);
    PyMem_Free(self->buffer);
    Py_XDECREF(self->last_read_name);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ensure_capacity(Reads *self, int fd) {
    if (fd < self->capacity) {
        return 0;
    }
    int capacity = self->capacity ? self->capacity : 64;
    while (capacity <= fd) {
        capacity *= 2;
    }
    Entry *entries = PyMem_Realloc(self->entries, sizeof(Entry) * (size_t)capacity);
    if (entries == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(entries + self->capacity, 0, sizeof(Entry) * (size_t)(capacity - self->capacity));
    self->entries = entries;
    self->capacity = capacity;
    return 0;
}

/* The monotonic clock now (Python's time.perf_counter and time.monotonic read the same clock), or
 * `fallback` should it fail. */
static double monotonic_now(double fallback) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return fallback;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static PyObject *Reads_add(Reads *self, PyObject *args) {
    int fd;
    PyObject *received, *lose;
    if (!PyArg_ParseTuple(args, "iOO", &fd, &received, &lose)) {
        return NULL;
    }
    if (fd < 0 || fd >= MAX_FD) {
        PyErr_Format(PyExc_ValueError, "file descriptor %d out of range (0 to %d)", fd, MAX_FD - 1);
        return NULL;
    }
    struct epoll_event event = {.events = EPOLLIN, .data.fd = fd};
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, fd, &event) < 0) { /* first: a bogus fd grows nothing */
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (ensure_capacity(self, fd) < 0) {
        epoll_ctl(self->epfd, EPOLL_CTL_DEL, fd, NULL);
        return NULL;
    }
    Entry old = self->entries[fd]; /* empty unless the fd was closed without remove() */
    Entry *e = &self->entries[fd];
    memset(e, 0, sizeof(*e));
    Py_INCREF(received);
    Py_INCREF(lose);
    e->received = received;
    e->lose = lose;
    e->added = monotonic_now(0.0);
    entry_clear(&old); /* last: releasing may run Python code */
    Py_RETURN_NONE;
}

static PyObject *Reads_remove(Reads *self, PyObject *arg) {
    int fd = fd_of(arg);
    if (fd == -2) {
        return NULL;
    }
    Entry *e = entry_of(self, fd);
    if (e != NULL) {
        epoll_ctl(self->epfd, EPOLL_CTL_DEL, fd, NULL); /* the socket may be closed already */
        entry_clear(e);
    }
    Py_RETURN_NONE;
}

static PyObject *Reads_keep(Reads *self, PyObject *args) {
    int fd;
    PyObject *kept, *state, *due, *markers, *template = NULL;
    Py_ssize_t due_at, max_data;
    if (!PyArg_ParseTuple(args, "iO!OOO!nn|O!", &fd, &PyList_Type, &kept, &state, &due, &PyTuple_Type, &markers,
                          &due_at, &max_data, &PyList_Type, &template)) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(markers); i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(markers, i))) {
            PyErr_SetString(PyExc_TypeError, "markers must be a tuple of bytes");
            return NULL;
        }
    }
    Entry *e = entry_of(self, fd);
    if (e == NULL) {
        Py_RETURN_NONE; /* lost in the meantime: nothing to keep */
    }
    Entry old = *e;
    Py_INCREF(kept);
    Py_INCREF(state);
    Py_INCREF(due);
    Py_INCREF(markers);
    Py_XINCREF(template);
    e->kept = kept;
    e->state = state;
    e->due = due;
    e->markers = markers;
    e->template = template;
    e->due_at = due_at;
    e->max_data = max_data;
    entry_unkeep(&old); /* last: releasing may run Python code */
    Py_RETURN_NONE;
}

static PyObject *Reads_unkeep(Reads *self, PyObject *arg) {
    int fd = fd_of(arg);
    if (fd == -2) {
        return NULL;
    }
    Entry *e = entry_of(self, fd);
    if (e != NULL) {
        entry_unkeep(e);
    }
    Py_RETURN_NONE;
}

static PyObject *Reads_keeping(Reads *self, PyObject *arg) {
    int fd = fd_of(arg);
    if (fd == -2) {
        return NULL;
    }
    Entry *e = entry_of(self, fd);
    return PyBool_FromLong(e != NULL && e->kept != NULL);
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The data of `read` when it is exactly one whole, non-final HTTP chunk; NULL otherwise. */
static const char *whole_chunk(const char *read, Py_ssize_t size, Py_ssize_t *data_size) {
    Py_ssize_t i = 0, length = 0;
    int digit;
    while (i < size && i < MAX_CHUNK_HEX && (digit = hex_value(read[i])) >= 0) {
        length = length * 16 + digit;
        i++;
    }
    if (i == 0 || length == 0 || i + 2 > size || read[i] != '\r' || read[i + 1] != '\n') {
        return NULL;
    }
    i += 2;
    if (i + length + 2 != size || read[size - 2] != '\r' || read[size - 1] != '\n') {
        return NULL;
    }
    *data_size = length;
    return read + i;
}

static int holds_marker(PyObject *markers, const char *data, Py_ssize_t size) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(markers); i++) {
        PyObject *marker = PyTuple_GET_ITEM(markers, i);
        Py_ssize_t length = PyBytes_GET_SIZE(marker);
        if (length == 0 || memmem(data, (size_t)size, PyBytes_AS_STRING(marker), (size_t)length) != NULL) {
            return 1;
        }
    }
    return 0;
}

/* Whether `data` is exactly one SSE event of one data line, "data: ...\n\n" (sse.lone_payload's shape). */
static int lone_event(const char *data, Py_ssize_t size) {
    if (size < 8 || memcmp(data, "data: ", 6) != 0 || data[size - 2] != '\n' || data[size - 1] != '\n') {
        return 0;
    }
    const char *line = data + 6;
    Py_ssize_t length = size - 8;
    return memchr(line, '\n', (size_t)length) == NULL && memchr(data, '\r', (size_t)size) == NULL;
}

/* What keep mode needs of an entry, held with references: an allocation may run a finalizer that
 * calls back into this object, so nothing of the entry is read after the first one. */
typedef struct {
    PyObject *kept, *state, *due, *template;
    Py_ssize_t due_at;
} Keeping;

/* The text of event data `payload` when it is the template's with only its text changed: the prefix,
 * at least one byte of JSON string content without a quote, a backslash or a control character, and
 * the suffix (chunk_shapes.plain_template vouches that any such content is the text of a plain chunk).
 * Sets *text to a new str, or to NULL when the payload does not fit or its content is not UTF-8 (the
 * reader's decoder judges it then); -1 on any other Python error. */
static int template_text(PyObject *template, const char *payload, Py_ssize_t size, PyObject **text) {
    *text = NULL;
    if (template == NULL || PyList_GET_SIZE(template) != 2) return 0;
    PyObject *prefix = PyList_GET_ITEM(template, 0), *suffix = PyList_GET_ITEM(template, 1);
    if (!PyBytes_Check(prefix) || !PyBytes_Check(suffix)) return 0;
    Py_ssize_t head = PyBytes_GET_SIZE(prefix), tail = PyBytes_GET_SIZE(suffix);
    if (size <= head + tail || memcmp(payload, PyBytes_AS_STRING(prefix), (size_t)head) != 0 ||
        memcmp(payload + size - tail, PyBytes_AS_STRING(suffix), (size_t)tail) != 0) {
        return 0;
    }
    const unsigned char *content = (const unsigned char *)payload + head;
    Py_ssize_t length = size - head - tail;
    for (Py_ssize_t i = 0; i < length; i++) {
        if (content[i] < 0x20 || content[i] == '"' || content[i] == '\\') return 0;
    }
    *text = PyUnicode_DecodeUTF8((const char *)content, length, NULL);
    if (*text == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -1;
        PyErr_Clear();
    }
    return 0;
}

/* Keep a read in keep mode: 1 kept, 0 not this read's shape, -1 a Python error. */
static int keep_read(Reads *self, const Entry *e, Py_ssize_t size, double stamp) {
    Py_ssize_t data_size;
    const char *data = whole_chunk(self->buffer, size, &data_size);
    if (data == NULL || data_size > e->max_data || !lone_event(data, data_size) ||
        holds_marker(e->markers, data, data_size)) {
        return 0;
    }
    Keeping k = {e->kept, e->state, e->due, e->template, e->due_at};
    Py_INCREF(k.kept);
    Py_INCREF(k.state);
    Py_INCREF(k.due);
    Py_XINCREF(k.template);
    int status = -1;
    PyObject *stamp_obj = PyFloat_FromDouble(stamp);
    PyObject *bytes = NULL; /* the event's data, or the text the template read in it */
    if (template_text(k.template, data + 6, data_size - 8, &bytes) == 0 && bytes == NULL) {
        bytes = PyBytes_FromStringAndSize(data + 6, data_size - 8);
    }
    PyObject *item = stamp_obj == NULL || bytes == NULL ? NULL : PyTuple_Pack(2, stamp_obj, bytes);
    if (item != NULL && PyList_Append(k.kept, item) == 0 &&
        PyObject_SetAttr(k.state, self->last_read_name, stamp_obj) == 0) {
        status = 1;
        if (PyList_GET_SIZE(k.kept) >= k.due_at) {
            PyObject *out = PyObject_CallNoArgs(k.due);
            status = out == NULL ? -1 : 1;
            Py_XDECREF(out);
        }
    }
    Py_XDECREF(item);
    Py_XDECREF(bytes);
    Py_XDECREF(stamp_obj);
    Py_DECREF(k.kept);
    Py_DECREF(k.state);
    Py_DECREF(k.due);
    Py_XDECREF(k.template);
    return status;
}

static double kernel_stamp(Reads *self, struct msghdr *message, double offset, int *found) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(message); c != NULL; c = CMSG_NXTHDR(message, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == self->timestamp_type &&
            c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof(ts));
            *found = 1;
            /* as Python computes it: float(seconds + nanoseconds * 1e-9 - offset) */
            return ((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9) - offset;
        }
    }
    *found = 0;
    return 0.0;
}

static int call_lose(PyObject *lose, PyObject *error) {
    PyObject *out = PyObject_CallOneArg(lose, error);
    if (out == NULL) return -1;
    Py_DECREF(out);
    return 0;
}

static int lose_with_errno(PyObject *lose) {
    PyErr_SetFromErrno(PyExc_OSError);
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    int status = value == NULL ? -1 : call_lose(lose, value);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return status;
}

static void note_gap(Reads *self, double gap) {
    if (gap < self->gap_floor) return;
    self->gaps++;
    if (gap < self->shortest_gap) self->shortest_gap = gap;
}

/* What arrived on `fd` since its last read, once, to where it goes; -1 on a Python error. */
static int read_into(Reads *self, int fd, double now, double offset, double polled, PyObject *received,
                     PyObject *lose) {
    union { /* aligned as the cmsghdr the kernel writes there */
        char bytes[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } control;
    struct iovec vector = {.iov_base = self->buffer, .iov_len = (size_t)self->buffer_size};
    struct msghdr message = {
        .msg_iov = &vector, .msg_iovlen = 1, .msg_control = control.bytes, .msg_controllen = sizeof(control.bytes)};
    ssize_t size = recvmsg(fd, &message, 0);
    if (size < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
        return lose_with_errno(lose); /* errno is still recvmsg's: nothing ran in between */
    }
    if (size == 0) return call_lose(lose, Py_None); /* the server closed its side */
    Entry *e = &self->entries[fd]; /* no Python code ran since the caller looked it up */
    int found;
    double stamp = message.msg_controllen ? kernel_stamp(self, &message, offset, &found) : (found = 0, 0.0);
    double readable_after = (!e->undrained && e->added < polled) ? polled : 0.0;
    if (found && stamp < readable_after - self->early_by) { /* impossibly early: not a stamp to use */
        found = 0;
        e->early++;
    }
    if (!found || stamp > now) now = monotonic_now(now);
    double chosen = (!found || stamp > now) ? now : stamp;
    if (chosen < e->last_stamp) chosen = e->last_stamp;
    e->undrained = size == self->buffer_size;
    if (now - chosen > self->waited) self->waited = now - chosen;
    if (e->kept != NULL && e->last_stamp > 0) note_gap(self, chosen - e->last_stamp); /* 0: no read yet */
    e->last_stamp = chosen;
    if (e->kept != NULL) {
        int kept = keep_read(self, e, size, chosen);
        if (kept != 0) return kept < 0 ? -1 : 0;
        e = entry_of(self, fd); /* not kept: keep mode ends with this read */
        if (e != NULL) entry_unkeep(e);
    }
    PyObject *out = PyObject_CallFunction(received, "dy#", chosen, self->buffer, (Py_ssize_t)size);
    if (out == NULL) return -1;
    Py_DECREF(out);
    return 0;
}

/* One recvmsg of `fd` and what it read to where it goes; -1 on a Python error. */
static int read_one(Reads *self, int fd, double now, double offset, double polled) {
    Entry *e = entry_of(self, fd);
    if (e == NULL) return 0;
    PyObject *received = e->received, *lose = e->lose;
    Py_INCREF(received);
    Py_INCREF(lose);
    int status = read_into(self, fd, now, offset, polled, received, lose);
    Py_DECREF(received);
    Py_DECREF(lose);
    return status;
}

static PyObject *Reads_read_ready(Reads *self, PyObject *args) {
    double now, offset;
    if (!PyArg_ParseTuple(args, "dd", &now, &offset)) {
        return NULL;
    }
    struct epoll_event events[MAX_EVENTS];
    self->waited = 0.0;
    int ready = epoll_wait(self->epfd, events, MAX_EVENTS, 0);
    if (ready < 0) {
        if (errno == EINTR) return PyLong_FromLong(0);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    for (int i = 0; i < ready; i++) {
        if (read_one(self, events[i].data.fd, now, offset, self->polled) < 0) return NULL;
    }
    /* Only a poll that read every ready socket says the others had nothing: one that stopped at a
     * protocol's error, or at MAX_EVENTS, left ready sockets unread, with their bytes older than it. */
    if (ready < MAX_EVENTS) self->polled = now;
    return PyLong_FromLong(ready);
}

static PyObject *Reads_read(Reads *self, PyObject *args) {
    int fd;
    double now, offset;
    if (!PyArg_ParseTuple(args, "idd", &fd, &now, &offset)) {
        return NULL;
    }
    if (read_one(self, fd, now, offset, self->polled) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Reads_waited(Reads *self, PyObject *Py_UNUSED(ignored)) {
    return PyFloat_FromDouble(self->waited);
}

static PyObject *Reads_early_of(Reads *self, PyObject *arg) {
    int fd = fd_of(arg);
    if (fd == -2) return NULL;
    Entry *e = entry_of(self, fd);
    return PyLong_FromSsize_t(e == NULL ? 0 : e->early);
}

static PyObject *Reads_take_gaps(Reads *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = Py_BuildValue("nd", self->gaps, self->shortest_gap);
    self->gaps = 0;
    self->shortest_gap = Py_HUGE_VAL;
    return out;
}

static PyObject *Reads_fileno(Reads *self, PyObject *Py_UNUSED(ignored)) { return PyLong_FromLong(self->epfd); }

static PyObject *Reads_close(Reads *self, PyObject *Py_UNUSED(ignored)) {
    Reads_clear(self);
    Reads_close_fd(self);
    Py_RETURN_NONE;
}

static PyMethodDef Reads_methods[] = {
    {"add", (PyCFunction)Reads_add, METH_VARARGS, "add(fd, received, lose): read fd from now on."},
    {"remove", (PyCFunction)Reads_remove, METH_O, "remove(fd): stop reading fd (no error if unknown)."},
    {"keep", (PyCFunction)Reads_keep, METH_VARARGS,
     "keep(fd, kept, state, due, markers, due_at, max_data[, template]): keep whole-chunk reads (see the module)."},
    {"unkeep", (PyCFunction)Reads_unkeep, METH_O, "unkeep(fd): hand every read of fd to received again."},
    {"keeping", (PyCFunction)Reads_keeping, METH_O, "keeping(fd): whether fd is in keep mode."},
    {"read_ready", (PyCFunction)Reads_read_ready, METH_VARARGS,
     "read_ready(now, offset) -> int: read every ready socket once; returns how many were ready."},
    {"read", (PyCFunction)Reads_read, METH_VARARGS, "read(fd, now, offset): read fd once, out of turn."},
    {"take_gaps", (PyCFunction)Reads_take_gaps, METH_NOARGS,
     "take_gaps() -> (count, shortest): the gaps of kept streams since the last call (see the module)."},
    {"waited", (PyCFunction)Reads_waited, METH_NOARGS,
     "waited() -> float: the longest a read of the last read_ready() waited (its now minus its stamp)."},
    {"early_of", (PyCFunction)Reads_early_of, METH_O, "early_of(fd) -> int: those of fd's reads (0: unknown)."},
    {"fileno", (PyCFunction)Reads_fileno, METH_NOARGS, "The epoll set's file descriptor."},
    {"close", (PyCFunction)Reads_close, METH_NOARGS, "Forget every socket and close the epoll set."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReadsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "exporter.probe._reads.Reads",
    .tp_doc = PyDoc_STR("The epoll set of one event loop's stamped sockets, read in C (see the module)."),
    .tp_basicsize = sizeof(Reads),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = Reads_new,
    .tp_init = (initproc)Reads_init,
    .tp_dealloc = (destructor)Reads_dealloc,
    .tp_traverse = (traverseproc)Reads_traverse,
    .tp_clear = (inquiry)Reads_clear,
    .tp_methods = Reads_methods,
};

static struct PyModuleDef reads_module = {
    PyModuleDef_HEAD_INIT, "exporter.probe._reads",
    "The probe's paced, kernel-stamped socket reads in C (optional: stamped.py reads in Python without it).",
    -1, NULL,
};

PyMODINIT_FUNC PyInit__reads(void) {
    if (PyType_Ready(&ReadsType) < 0) return NULL;
    PyObject *module = PyModule_Create(&reads_module);
    if (module == NULL) return NULL;
    Py_INCREF(&ReadsType);
    if (PyModule_AddObject(module, "Reads", (PyObject *)&ReadsType) < 0) {
        Py_DECREF(&ReadsType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
