/* A fake NVIDIA driver for repro's tests: the CUDA driver API functions and the NVML
 * functions repro calls, answering from environment variables the test sets, so that the
 * fingerprint's GPU probes run on a machine without a GPU. tests/env/fakegpu.rs builds this
 * file twice with `cc -shared -fPIC`, as libcuda.so.VERSION (soname libcuda.so.1) and as
 * libnvidia-ml.so.VERSION (soname libnvidia-ml.so.1), and puts them first on LD_LIBRARY_PATH.
 *
 * Both builds hold both APIs; each process uses the CUDA half of the one and the NVML half
 * of the other. They share no state: every answer is read from the environment at the
 * call, so a device's UUID is the same through CUDA and NVML:
 *
 *   FAKEGPU_COUNT            devices CUDA sees (default 1)
 *   FAKEGPU_CUDA_VERSION     cuDriverGetVersion (default 13000)
 *   FAKEGPU_NAME             model (default "NVIDIA Fake GPU")
 *   FAKEGPU_CC               compute capability "major.minor" (default "9.0")
 *   FAKEGPU_SMS, FAKEGPU_MEM_MIB, FAKEGPU_L2_KIB, FAKEGPU_SMEM_KIB
 *   FAKEGPU_UUID             32 hex digits, dashes and a "GPU-" prefix allowed
 *                            (default fa ce 00 .. 00 <index>)
 *   FAKEGPU_PCI              PCI bus id (default 0000:<index + 1>:00.0)
 *   FAKEGPU_ECC, FAKEGPU_PERSISTENCE, FAKEGPU_MIG   0 or 1
 *   FAKEGPU_POWER_W, FAKEGPU_MAX_SM_MHZ, FAKEGPU_MAX_MEM_MHZ, FAKEGPU_SM_MHZ,
 *   FAKEGPU_MEM_MHZ, FAKEGPU_TEMP_C, FAKEGPU_VBIOS, FAKEGPU_OTHER_PROCS
 *   FAKEGPU_NVML_COUNT       devices NVML lists (default FAKEGPU_COUNT)
 *   FAKEGPU_NVML_REVERSE=1   NVML lists the devices in the reverse of CUDA's order
 *   FAKEGPU_TIME_SCALE       kernel times on this device are multiplied by this (default 1)
 *
 * CUDA honours CUDA_VISIBLE_DEVICES (indices or GPU-UUID prefixes) as the real driver does;
 * NVML does not, as the real NVML does not.
 *
 * A per-device variable FAKEGPU_<KEY>_<index> overrides FAKEGPU_<KEY> for that device, so
 * two devices can differ.
 *
 *   FAKEGPU_FAIL             comma-separated functions that fail: `name`, `name=code`,
 *                            `name@index` (only for that device), `name@index=code`,
 *                            `name#N` (only its Nth call in the process, from 1, counted
 *                            over every device and only for calls that reach their failure
 *                            check; before any `@index`); the code defaults to 999
 *                            (CUDA_ERROR_UNKNOWN, NVML_ERROR_UNKNOWN)
 *   FAKEGPU_LOG              a file each call appends its function's name to (and
 *                            `process` once per process, at its first cuInit)
 *   FAKEGPU_EXCLUSIVE        a file's path: the devices take one context at a time across
 *                            processes, as in exclusive-process compute mode (a process's
 *                            first primary-context retain locks the file until the process
 *                            ends; another's fails with CUDA_ERROR_DEVICE_UNAVAILABLE)
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <signal.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ---------------------------------------------------------------- configuration */

static void log_call(const char *name) {
    const char *path = getenv("FAKEGPU_LOG");
    if (!path || !*path)
        return;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0)
        return;
    char line[128];
    int n = snprintf(line, sizeof line, "%s\n", name);
    if (n > 0 && write(fd, line, (size_t)n) < 0) {
        /* a log that cannot be written changes no answer */
    }
    close(fd);
}

/* FAKEGPU_<key>_<dev>, else FAKEGPU_<key>, else NULL. dev < 0: only FAKEGPU_<key>. */
static const char *setting(const char *key, int dev) {
    char name[96];
    if (dev >= 0) {
        snprintf(name, sizeof name, "FAKEGPU_%s_%d", key, dev);
        const char *v = getenv(name);
        if (v)
            return v;
    }
    snprintf(name, sizeof name, "FAKEGPU_%s", key);
    return getenv(name);
}

static long number(const char *key, int dev, long dflt) {
    const char *v = setting(key, dev);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

static const char *text(const char *key, int dev, const char *dflt) {
    const char *v = setting(key, dev);
    return v ? v : dflt;
}

/* How many times `name` has been asked for its failure in this process, this time
 * included. */
static long call_number(const char *name) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static struct {
        const char *name;
        long n;
    } seen[256];
    static int used;
    long n = 1;
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < used && strcmp(seen[i].name, name) != 0)
        i++;
    if (i < used)
        n = ++seen[i].n;
    else if (used < 256) {
        seen[used].name = name;
        seen[used].n = 1;
        used++;
    }
    pthread_mutex_unlock(&lock);
    return n;
}

/* The code `name` must fail with for device `dev` (-1: no device), or 0. */
static int failure(const char *name, int dev) {
    const char *list = getenv("FAKEGPU_FAIL");
    if (!list)
        return 0;
    long nth = call_number(name);
    size_t len = strlen(name);
    const char *p = list;
    while (*p) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        if ((size_t)(end - p) >= len && strncmp(p, name, len) == 0) {
            const char *q = p + len;
            int ok = 1;
            if (q < end && *q == '#')
                ok = strtol(q + 1, (char **)&q, 10) == nth;
            if (q < end && *q == '@') {
                long only = strtol(q + 1, (char **)&q, 10);
                ok = ok && only == dev;
            }
            int code = 999;
            if (q < end && *q == '=')
                code = (int)strtol(q + 1, (char **)&q, 10);
            if (q == end && ok)
                return code;
        }
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* The GPUs the machine has (NVML's view; per-device settings are by this index). */
static int device_count(void) {
    long n = number("COUNT", -1, 1);
    return n < 0 ? 0 : n > 64 ? 64 : (int)n;
}

static void uuid_bytes(int dev, unsigned char out[16]) {
    memset(out, 0, 16);
    out[0] = 0xfa;
    out[1] = 0xce;
    out[15] = (unsigned char)dev;
    const char *v = setting("UUID", dev);
    if (!v)
        return;
    if (strncmp(v, "GPU-", 4) == 0)
        v += 4;
    int i = 0;
    while (*v && i < 32) {
        if (*v == '-') {
            v++;
            continue;
        }
        char c = (char)tolower((unsigned char)*v++);
        int d = isdigit((unsigned char)c) ? c - '0' : c - 'a' + 10;
        if (i % 2 == 0)
            out[i / 2] = (unsigned char)(d << 4);
        else
            out[i / 2] |= (unsigned char)d;
        i++;
    }
}

static void uuid_text(int dev, char *out, size_t len) {
    unsigned char b[16];
    uuid_bytes(dev, b);
    snprintf(out, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

/* CUDA's view: the devices CUDA_VISIBLE_DEVICES lists (indices, or GPU-UUID prefixes), in
 * its order, up to the first entry that names none, as the real driver reads it; every
 * device when it is unset. Returns how many, with their indices in `out`. */
static int visible(int out[64]) {
    const char *list = getenv("CUDA_VISIBLE_DEVICES");
    int all = device_count(), n = 0;
    if (!list) {
        for (int i = 0; i < all; i++)
            out[n++] = i;
        return n;
    }
    const char *p = list;
    while (*p && n < 64) {
        while (*p == ' ')
            p++;
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        size_t len = (size_t)(end - p);
        while (len > 0 && p[len - 1] == ' ')
            len--;
        int found = -1;
        if (len > 4 && strncmp(p, "GPU-", 4) == 0) {
            for (int i = 0; i < all && found < 0; i++) {
                char t[64];
                uuid_text(i, t, sizeof t);
                if (strncmp(t, p, len) == 0)
                    found = i;
            }
        } else if (len > 0) {
            char *num_end;
            long i = strtol(p, &num_end, 10);
            if (num_end == p + len && i >= 0 && i < all)
                found = (int)i;
        }
        if (found < 0)
            break;
        out[n++] = found;
        p = *end ? end + 1 : end;
    }
    return n;
}

static int cuda_count(void) {
    int list[64];
    return visible(list);
}

/* The device behind CUDA ordinal `ordinal`, or -1. */
static int physical(int ordinal) {
    int list[64];
    int n = visible(list);
    return ordinal >= 0 && ordinal < n ? list[ordinal] : -1;
}

/* ---------------------------------------------------------------- CUDA driver API */

typedef int CUresult;
typedef int CUdevice;
enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
};

static int cuda_initialised;

#define CU_FAIL(name, dev)                                                                  \
    do {                                                                                    \
        log_call(name);                                                                     \
        int code_ = failure(name, (dev) < 0 ? -1 : physical(dev));                          \
        if (code_)                                                                          \
            return code_;                                                                   \
    } while (0)

/* Checks a CUDA ordinal and declares `p`, the device behind it. */
#define CU_DEVICE(dev)                                                                      \
    if (!cuda_initialised)                                                                  \
        return CUDA_ERROR_NOT_INITIALIZED;                                                  \
    int p = physical(dev);                                                                  \
    if (p < 0)                                                                              \
        return CUDA_ERROR_INVALID_DEVICE

EXPORT CUresult cuDriverGetVersion(int *version) {
    CU_FAIL("cuDriverGetVersion", -1);
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = (int)number("CUDA_VERSION", -1, 13000);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuInit(unsigned flags) {
    /* Once per process: how many processes used the driver (a reused GPU worker is one). */
    static int seen;
    if (!seen) {
        seen = 1;
        log_call("process");
    }
    CU_FAIL("cuInit", -1);
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (cuda_count() == 0)
        return 100; /* CUDA_ERROR_NO_DEVICE, as the real driver answers */
    cuda_initialised = 1;
    return CUDA_SUCCESS;
}

/* NVRTC itself opens libcuda.so.1, calls cuInit and asks for the driver's private export
 * tables: there are none here, which NVRTC takes as a driver without them. */
EXPORT CUresult cuGetExportTable(const void **table, const void *id) {
    CU_FAIL("cuGetExportTable", -1);
    (void)id;
    *table = NULL;
    return 801; /* CUDA_ERROR_NOT_SUPPORTED */
}

EXPORT CUresult cuDeviceGetCount(int *count) {
    CU_FAIL("cuDeviceGetCount", -1);
    if (!cuda_initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    *count = cuda_count();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    CU_FAIL("cuDeviceGet", ordinal);
    CU_DEVICE(ordinal);
    (void)p;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    CU_FAIL("cuDeviceGetName", dev);
    CU_DEVICE(dev);
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", text("NAME", p, "NVIDIA Fake GPU"));
    return CUDA_SUCCESS;
}

static long attribute(int attr, int dev, int *known) {
    const char *cc = text("CC", dev, "9.0");
    *known = 1;
    switch (attr) {
    case 75: /* COMPUTE_CAPABILITY_MAJOR */
        return strtol(cc, NULL, 10);
    case 76: { /* COMPUTE_CAPABILITY_MINOR */
        const char *dot = strchr(cc, '.');
        return dot ? strtol(dot + 1, NULL, 10) : 0;
    }
    case 16: /* MULTIPROCESSOR_COUNT */
        return number("SMS", dev, 132);
    case 38: /* L2_CACHE_SIZE, bytes */
        return number("L2_KIB", dev, 61440) << 10;
    case 97: /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, bytes */
        return number("SMEM_KIB", dev, 227) << 10;
    case 115: /* MEMORY_POOLS_SUPPORTED: no stream-ordered allocator here */
        return 0;
    default:
        *known = 0;
        return 0;
    }
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attr, CUdevice dev) {
    CU_FAIL("cuDeviceGetAttribute", dev);
    CU_DEVICE(dev);
    int known;
    long v = attribute(attr, p, &known);
    if (!known)
        return CUDA_ERROR_INVALID_VALUE;
    *value = (int)v;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    CU_FAIL("cuDeviceTotalMem_v2", dev);
    CU_DEVICE(dev);
    *bytes = (size_t)number("MEM_MIB", p, 143155) << 20;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(unsigned char *uuid, CUdevice dev) {
    CU_FAIL("cuDeviceGetUuid_v2", dev);
    CU_DEVICE(dev);
    uuid_bytes(p, uuid);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice dev) {
    CU_FAIL("cuDeviceGetPCIBusId", dev);
    CU_DEVICE(dev);
    char dflt[32];
    snprintf(dflt, sizeof dflt, "0000:%02x:00.0", p + 1);
    snprintf(id, (size_t)len, "%s", text("PCI", p, dflt));
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- kernels
 *
 * Enough of contexts, modules, memory, streams, events and graphs for repro's GPU job
 * (src/engines/gpurun.rs) to check and time a kernel. Device memory is host memory. A
 * kernel does no work, but each launch
 *   - sets every byte of each buffer it is passed to 0 (0x3f where the module holds the
 *     token fakegpu_wrong_<kernel>, so that it disagrees with its reference); which
 *     parameters are buffers is read from the PTX's .entry (a cubin's launches write nothing);
 *   - advances a virtual clock of the stream by the kernel's time: fakegpu_ns_<N> anywhere
 *     in the module image (a __device__ variable's name, in PTX or in a cubin's symbol
 *     table) is N nanoseconds (default 10000), times the device's FAKEGPU_TIME_SCALE, plus
 *     a deterministic jitter of FAKEGPU_JITTER_PPM millionths (default 5000) either way.
 *     Events read that clock.
 * fakegpu_trap_<kernel> makes the next synchronisation fail with CUDA_ERROR_LAUNCH_FAILED
 * (sticky, as on a real GPU); fakegpu_hang_<kernel> makes it never return.
 */

enum {
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
};

typedef struct {
    int device;
} fake_ctx;

typedef struct {
    char *image;
    size_t len;
    int is_ptx;
    double ns;
} fake_module;

#define MAX_PARAMS 64
typedef struct {
    fake_module *module;
    char name[256];
    int nparams; /* -1: unknown (a cubin) */
    int sizes[MAX_PARAMS];
    int wrong, trap, hang;
} fake_function;

typedef struct {
    int capturing;
    double captured_ns;
    unsigned captured_launches;
    /* Graph launches on it, and how many of them a synchronisation has waited for. */
    unsigned long launched, waited;
} fake_stream;

typedef struct {
    double t;
    int recorded;
    /* The stream it was recorded on, and that stream's graph launches before it. */
    fake_stream *on;
    unsigned long upto;
} fake_event;

/* The created streams, to tell when one still runs graphs nobody waited for: a real created
 * (non-blocking) stream does not wait for the legacy stream, nor the legacy stream for it, so
 * legacy work, frees and graph destruction while one is busy are unordered. The fake runs
 * everything at once; it logs "unordered: WHAT" instead, for a test to count. */
enum { MAX_STREAMS = 64 };
static fake_stream *streams[MAX_STREAMS];

static void note_unordered(const char *what) {
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (streams[i] && streams[i]->launched > streams[i]->waited) {
            char line[96];
            snprintf(line, sizeof line, "unordered: %s", what);
            log_call(line);
            return;
        }
    }
}

typedef struct {
    double ns;
} fake_graph;

typedef struct {
    unsigned char *base;
    size_t size;
} allocation;

#define MAX_ALLOCS 4096
static allocation allocs[MAX_ALLOCS];
static fake_ctx contexts[64];
static __thread fake_ctx *current;
static double clock_ns;         /* the virtual clock all streams share */
static unsigned long launches;  /* for the jitter */
static int sticky;              /* a trapped kernel's error, for every later synchronisation */
static int pending_trap, pending_hang;

static const unsigned char *find(const unsigned char *hay, size_t n, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = 0; m <= n && i <= n - m; i++)
        if (hay[i] == (unsigned char)needle[0] && memcmp(hay + i, needle, m) == 0)
            return hay + i;
    return NULL;
}

static int ident(unsigned char c) { return isalnum(c) || c == '_' || c == '$'; }

/* Whether the module holds `prefix` + `name` as a whole identifier. */
static int has_token(const fake_module *m, const char *prefix, const char *name) {
    char token[320];
    snprintf(token, sizeof token, "%s%s", prefix, name);
    size_t tl = strlen(token);
    const unsigned char *p = (const unsigned char *)m->image, *end = p + m->len;
    while ((p = find(p, (size_t)(end - p), token)) != NULL) {
        int starts = p == (const unsigned char *)m->image || !ident(p[-1]);
        int ends = p + tl >= end || !ident(p[tl]);
        if (starts && ends)
            return 1;
        p += tl;
    }
    return 0;
}

static size_t elf_size(const unsigned char *image) {
    /* 64-bit ELF: the section headers are the last thing in a cubin. */
    uint64_t shoff;
    uint16_t shentsize, shnum;
    memcpy(&shoff, image + 0x28, 8);
    memcpy(&shentsize, image + 0x3a, 2);
    memcpy(&shnum, image + 0x3c, 2);
    return (size_t)(shoff + (uint64_t)shentsize * shnum);
}

/* FAKEGPU_EXCLUSIVE: this process holds the devices' one context (the lock stays until
   the process ends), or CUDA_ERROR_DEVICE_UNAVAILABLE (46) while another holds it. */
static int exclusive_fd = -1;
static int exclusive_take(void) {
    const char *path = getenv("FAKEGPU_EXCLUSIVE");
    if (!path || !*path || exclusive_fd >= 0)
        return 0;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return 0;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        return 46;
    }
    exclusive_fd = fd;
    return 0;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(fake_ctx **ctx, CUdevice dev) {
    CU_FAIL("cuDevicePrimaryCtxRetain", dev);
    CU_DEVICE(dev);
    int busy = exclusive_take();
    if (busy)
        return busy;
    contexts[p].device = p;
    *ctx = &contexts[p];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    CU_FAIL("cuDevicePrimaryCtxRelease_v2", dev);
    CU_DEVICE(dev);
    (void)p;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(fake_ctx **ctx) {
    CU_FAIL("cuCtxGetCurrent", -1);
    *ctx = current;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(fake_ctx *ctx) {
    CU_FAIL("cuCtxSetCurrent", -1);
    current = ctx;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void) {
    CU_FAIL("cuCtxSynchronize", -1);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (streams[i])
            streams[i]->waited = streams[i]->launched;
    return sticky;
}

#define CU_CONTEXT()                                                                        \
    do {                                                                                    \
        if (!current)                                                                       \
            return CUDA_ERROR_INVALID_CONTEXT;                                              \
    } while (0)

EXPORT CUresult cuModuleLoadData(fake_module **out, const void *image) {
    CU_FAIL("cuModuleLoadData", -1);
    CU_CONTEXT();
    const unsigned char *img = image;
    fake_module *m = calloc(1, sizeof *m);
    if (memcmp(img, "\177ELF", 4) == 0) {
        m->len = elf_size(img);
    } else {
        m->len = strlen(image);
        m->is_ptx = 1;
        if (!find(img, m->len, ".version") || !find(img, m->len, ".entry")) {
            free(m);
            return CUDA_ERROR_INVALID_IMAGE;
        }
    }
    m->image = malloc(m->len + 1);
    memcpy(m->image, img, m->len);
    m->image[m->len] = 0;
    m->ns = 10000;
    const unsigned char *t = find((unsigned char *)m->image, m->len, "fakegpu_ns_");
    if (t)
        m->ns = strtod((const char *)t + strlen("fakegpu_ns_"), NULL);
    *out = m;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleUnload(fake_module *m) {
    CU_FAIL("cuModuleUnload", -1);
    free(m->image);
    free(m);
    return CUDA_SUCCESS;
}

/* The sizes of an entry's parameters, from `.entry NAME( .param .u64 x, ... )`. */
static int ptx_params(const char *ptx, const char *name, int sizes[MAX_PARAMS]) {
    char head[300];
    snprintf(head, sizeof head, ".entry %s(", name);
    const char *p = strstr(ptx, head);
    if (!p)
        return -1;
    p += strlen(head);
    const char *close = strchr(p, ')');
    if (!close)
        return -1;
    int n = 0;
    while ((p = strstr(p, ".param")) != NULL && p < close && n < MAX_PARAMS) {
        p += strlen(".param");
        const char *end = p;
        while (end < close && *end != ',')
            end++;
        int size = 0;
        for (const char *q = p; q < end; q++) {
            if (q[0] == '.' && strchr("usbf", q[1]) && isdigit((unsigned char)q[2])) {
                size = atoi(q + 2) / 8;
                break;
            }
        }
        const char *bracket = memchr(p, '[', (size_t)(end - p));
        if (bracket)
            size *= atoi(bracket + 1);
        sizes[n++] = size;
        p = end;
    }
    return n;
}

EXPORT CUresult cuModuleGetFunction(fake_function **out, fake_module *m, const char *name) {
    CU_FAIL("cuModuleGetFunction", -1);
    CU_CONTEXT();
    /* repro's own fill and compare kernels compute what the fake cannot: refusing them
     * sends the runner down its CPU path, as a driver that cannot load them would. */
    if (strcmp(name, "repro_fill") == 0 || strcmp(name, "repro_compare") == 0)
        return CUDA_ERROR_NOT_FOUND;
    fake_function *f = calloc(1, sizeof *f);
    f->module = m;
    snprintf(f->name, sizeof f->name, "%s", name);
    if (m->is_ptx) {
        f->nparams = ptx_params(m->image, name, f->sizes);
        if (f->nparams < 0) {
            free(f);
            return CUDA_ERROR_NOT_FOUND;
        }
    } else {
        if (!has_token(m, "", name)) {
            free(f);
            return CUDA_ERROR_NOT_FOUND;
        }
        f->nparams = -1;
    }
    f->wrong = has_token(m, "fakegpu_wrong_", name);
    f->trap = has_token(m, "fakegpu_trap_", name);
    f->hang = has_token(m, "fakegpu_hang_", name);
    *out = f;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuFuncGetAttribute(int *value, int attr, fake_function *f) {
    CU_FAIL("cuFuncGetAttribute", -1);
    (void)attr;
    (void)f;
    *value = 0;
    return CUDA_SUCCESS;
}

static allocation *allocation_of(uint64_t ptr, size_t bytes) {
    for (int i = 0; i < MAX_ALLOCS; i++) {
        allocation *a = &allocs[i];
        if (a->base && ptr >= (uint64_t)(uintptr_t)a->base &&
            ptr + bytes <= (uint64_t)(uintptr_t)a->base + a->size)
            return a;
    }
    return NULL;
}

static size_t allocated(void) {
    size_t total = 0;
    for (int i = 0; i < MAX_ALLOCS; i++)
        total += allocs[i].size;
    return total;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
    CU_FAIL("cuMemGetInfo_v2", -1);
    CU_CONTEXT();
    size_t all = (size_t)number("MEM_MIB", current->device, 143155) << 20;
    size_t used = allocated();
    *total = all;
    *free_ = used < all ? all - used : 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(uint64_t *ptr, size_t bytes) {
    CU_FAIL("cuMemAlloc_v2", -1);
    CU_CONTEXT();
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (!allocs[i].base) {
            allocs[i].base = malloc(bytes ? bytes : 1);
            if (!allocs[i].base)
                return CUDA_ERROR_OUT_OF_MEMORY;
            allocs[i].size = bytes;
            *ptr = (uint64_t)(uintptr_t)allocs[i].base;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuMemFree_v2(uint64_t ptr) {
    CU_FAIL("cuMemFree_v2", -1);
    note_unordered("a free");
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].base && (uint64_t)(uintptr_t)allocs[i].base == ptr) {
            free(allocs[i].base);
            allocs[i].base = NULL;
            allocs[i].size = 0;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t bytes) {
    CU_FAIL("cuMemcpyHtoD_v2", -1);
    note_unordered("a copy");
    if (sticky)
        return sticky;
    if (!allocation_of(dst, bytes))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return CUDA_SUCCESS;
}

static CUresult wait_for_kernels(void);

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t bytes) {
    CU_FAIL("cuMemcpyDtoH_v2", -1);
    note_unordered("a copy");
    CUresult r = wait_for_kernels();
    if (r)
        return r;
    if (!allocation_of(src, bytes))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return CUDA_SUCCESS;
}

/* Work on a created stream, outside a capture (a launch, memset or copy): ordinary launches
 * and memsets there make a real context's later kernels slower (#29), so repro does that work
 * on the legacy stream (NULL); the log line lets a test hold it to that. */
static void note_stream_work(const fake_stream *s) {
    if (s && !s->capturing)
        log_call("work on a created stream");
    if (!s)
        note_unordered("work on the legacy stream");
}

/* Graphs and the events that time them may run on a created stream: graph mode launches its
 * graphs on the stream it captured them on (graphs on the legacy stream vary more between
 * processes); they are logged apart from the work above, as `what` on a created stream. */
static void note_graph_work(const fake_stream *s, const char *what) {
    if (s && !s->capturing) {
        char line[64];
        snprintf(line, sizeof line, "%s on a created stream", what);
        log_call(line);
    }
}

EXPORT CUresult cuMemsetD8Async(uint64_t dst, unsigned char value, size_t bytes, void *stream) {
    CU_FAIL("cuMemsetD8Async", -1);
    note_stream_work(stream);
    if (sticky)
        return sticky;
    if (!allocation_of(dst, bytes))
        return CUDA_ERROR_INVALID_VALUE;
    memset((void *)(uintptr_t)dst, value, bytes);
    return CUDA_SUCCESS;
}

/* Pinned host memory and the stream-ordered copies: the fake runs everything at once. */
EXPORT CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags) {
    CU_FAIL("cuMemHostAlloc", -1);
    (void)flags;
    *p = malloc(bytes ? bytes : 1);
    return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuMemFreeHost(void *p) {
    CU_FAIL("cuMemFreeHost", -1);
    free(p);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t bytes, void *stream) {
    note_stream_work(stream);
    return cuMemcpyHtoD_v2(dst, src, bytes);
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t bytes, void *stream) {
    note_stream_work(stream);
    return cuMemcpyDtoH_v2(dst, src, bytes);
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t bytes, void *stream) {
    CU_FAIL("cuMemcpyDtoDAsync_v2", -1);
    note_stream_work(stream);
    if (sticky)
        return sticky;
    if (!allocation_of(dst, bytes) || !allocation_of(src, bytes))
        return CUDA_ERROR_INVALID_VALUE;
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamCreate(fake_stream **s, unsigned flags) {
    CU_FAIL("cuStreamCreate", -1);
    CU_CONTEXT();
    if (flags & 1) /* CU_STREAM_NON_BLOCKING */
        log_call("a non-blocking stream");
    *s = calloc(1, sizeof **s);
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (!streams[i]) {
            streams[i] = *s;
            break;
        }
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamDestroy_v2(fake_stream *s) {
    CU_FAIL("cuStreamDestroy_v2", -1);
    if (s && s->launched > s->waited)
        log_call("unordered: a stream destroyed while it runs graphs");
    for (int i = 0; i < MAX_STREAMS; i++)
        if (streams[i] == s)
            streams[i] = NULL;
    free(s);
    return CUDA_SUCCESS;
}

/* Where a trapped or hung kernel shows: at the next synchronisation. */
static CUresult wait_for_kernels(void) {
    if (pending_hang) {
        log_call("hang");
        for (;;)
            pause();
    }
    if (pending_trap) {
        pending_trap = 0;
        sticky = CUDA_ERROR_LAUNCH_FAILED;
    }
    return sticky;
}

EXPORT CUresult cuStreamSynchronize(fake_stream *s) {
    CU_FAIL("cuStreamSynchronize", -1);
    if (s)
        s->waited = s->launched;
    return wait_for_kernels();
}

static double kernel_ns(const fake_function *f) {
    long ppm = number("JITTER_PPM", -1, 5000);
    /* A fixed sequence in [-1, 1]: the same samples in every run. */
    unsigned long k = launches++;
    double u = (double)((k * 2654435761ul) % 2001ul) / 1000.0 - 1.0;
    double scale = strtod(text("TIME_SCALE", current ? current->device : -1, "1"), NULL);
    return f->module->ns * scale * (1.0 + u * (double)ppm / 1e6);
}

EXPORT CUresult cuLaunchKernel(fake_function *f, unsigned gx, unsigned gy, unsigned gz,
                               unsigned bx, unsigned by, unsigned bz, unsigned shared,
                               fake_stream *s, void **params, void **extra) {
    CU_FAIL("cuLaunchKernel", -1);
    CU_CONTEXT();
    (void)extra;
    (void)shared;
    if (sticky)
        return sticky;
    if (!f || gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
        (unsigned long)bx * by * bz > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    note_stream_work(s);
    double ns = kernel_ns(f);
    if (s && s->capturing) {
        s->captured_ns += ns;
        s->captured_launches++;
        return CUDA_SUCCESS;
    }
    clock_ns += ns;
    for (int i = 0; i < f->nparams; i++) {
        if (f->sizes[i] != 8)
            continue;
        uint64_t v;
        memcpy(&v, params[i], 8);
        allocation *a = allocation_of(v, 1);
        if (a && (uint64_t)(uintptr_t)a->base == v)
            memset(a->base, f->wrong ? 0x3f : 0, a->size);
    }
    pending_trap |= f->trap;
    pending_hang |= f->hang;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventCreate(fake_event **e, unsigned flags) {
    CU_FAIL("cuEventCreate", -1);
    CU_CONTEXT();
    (void)flags;
    *e = calloc(1, sizeof **e);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(fake_event *e) {
    CU_FAIL("cuEventDestroy_v2", -1);
    free(e);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(fake_event *e, fake_stream *s) {
    CU_FAIL("cuEventRecord", -1);
    note_graph_work(s, "event");
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    e->t = clock_ns;
    e->recorded = 1;
    e->on = s;
    e->upto = s ? s->launched : 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventSynchronize(fake_event *e) {
    CU_FAIL("cuEventSynchronize", -1);
    if (!e || !e->recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    if (e->on && e->upto > e->on->waited)
        e->on->waited = e->upto;
    return wait_for_kernels();
}

EXPORT CUresult cuEventElapsedTime_v2(float *ms, fake_event *start, fake_event *end) {
    CU_FAIL("cuEventElapsedTime_v2", -1);
    if (!start || !end || !start->recorded || !end->recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    /* The graph launches between two events of one created stream are timed ones. */
    if (start->on && start->on == end->on)
        for (unsigned long i = start->upto; i < end->upto; i++)
            log_call("timed graph launch");
    *ms = (float)((end->t - start->t) / 1e6);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventElapsedTime(float *ms, fake_event *start, fake_event *end) {
    return cuEventElapsedTime_v2(ms, start, end);
}

EXPORT CUresult cuStreamBeginCapture_v2(fake_stream *s, int mode) {
    CU_FAIL("cuStreamBeginCapture_v2", -1);
    (void)mode;
    if (!s || s->capturing)
        return CUDA_ERROR_INVALID_VALUE;
    s->capturing = 1;
    s->captured_ns = 0;
    s->captured_launches = 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamEndCapture(fake_stream *s, fake_graph **g) {
    CU_FAIL("cuStreamEndCapture", -1);
    if (!s || !s->capturing)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    s->capturing = 0;
    char line[64];
    snprintf(line, sizeof line, "a graph of %u launches", s->captured_launches);
    log_call(line);
    *g = calloc(1, sizeof **g);
    (*g)->ns = s->captured_ns;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphInstantiateWithFlags(fake_graph **exec, fake_graph *g,
                                            unsigned long long flags) {
    CU_FAIL("cuGraphInstantiateWithFlags", -1);
    (void)flags;
    *exec = calloc(1, sizeof **exec);
    (*exec)->ns = g->ns;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphLaunch(fake_graph *exec, fake_stream *s) {
    CU_FAIL("cuGraphLaunch", -1);
    note_graph_work(s, "graph launch");
    if (sticky)
        return sticky;
    if (s && !s->capturing)
        s->launched++;
    else if (!s)
        note_unordered("a graph launched on the legacy stream");
    clock_ns += exec->ns;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphDestroy(fake_graph *g) {
    CU_FAIL("cuGraphDestroy", -1);
    free(g);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphExecDestroy(fake_graph *g) {
    CU_FAIL("cuGraphExecDestroy", -1);
    note_unordered("a graph destroyed");
    free(g);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- NVML */

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
};

typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId;
    unsigned computeInstanceId;
} nvmlProcessInfo_t;

static int nvml_initialised;

static int nvml_count(void) {
    long n = number("NVML_COUNT", -1, device_count());
    return n < 0 ? 0 : (int)n;
}

/* The CUDA ordinal of NVML's index-th device. */
static int nvml_device_of(unsigned index) {
    const char *rev = getenv("FAKEGPU_NVML_REVERSE");
    if (rev && strcmp(rev, "1") == 0)
        return nvml_count() - 1 - (int)index;
    return (int)index;
}

/* Handles are the CUDA ordinal plus one, never dereferenced. */
static int handle_device(nvmlDevice_t h) { return (int)(uintptr_t)h - 1; }

#define NVML_DEVICE(name, h)                                                                \
    int dev = handle_device(h);                                                             \
    do {                                                                                    \
        log_call(name);                                                                     \
        if (!nvml_initialised)                                                              \
            return NVML_ERROR_UNINITIALIZED;                                                \
        if (dev < 0 || dev >= device_count())                                               \
            return NVML_ERROR_INVALID_ARGUMENT;                                             \
        int code_ = failure(name, dev);                                                     \
        if (code_)                                                                          \
            return code_;                                                                   \
    } while (0)

EXPORT nvmlReturn_t nvmlInit_v2(void) {
    log_call("nvmlInit_v2");
    int code = failure("nvmlInit_v2", -1);
    if (code)
        return code;
    nvml_initialised = 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    return nvmlInit_v2();
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
    log_call("nvmlShutdown");
    nvml_initialised = 0;
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    return r == NVML_SUCCESS ? "Success" : "Fake error";
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    log_call("nvmlDeviceGetCount_v2");
    if (!nvml_initialised)
        return NVML_ERROR_UNINITIALIZED;
    int code = failure("nvmlDeviceGetCount_v2", -1);
    if (code)
        return code;
    *count = (unsigned)nvml_count();
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *h) {
    log_call("nvmlDeviceGetHandleByIndex_v2");
    if (!nvml_initialised)
        return NVML_ERROR_UNINITIALIZED;
    if ((int)index >= nvml_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    int dev = nvml_device_of(index);
    int code = failure("nvmlDeviceGetHandleByIndex_v2", dev);
    if (code)
        return code;
    *h = (nvmlDevice_t)(uintptr_t)(dev + 1);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *h) {
    log_call("nvmlDeviceGetHandleByUUID");
    if (!nvml_initialised)
        return NVML_ERROR_UNINITIALIZED;
    for (unsigned i = 0; i < (unsigned)nvml_count(); i++) {
        int dev = nvml_device_of(i);
        char text_[64];
        uuid_text(dev, text_, sizeof text_);
        if (strcmp(text_, uuid) == 0) {
            int code = failure("nvmlDeviceGetHandleByUUID", dev);
            if (code)
                return code;
            *h = (nvmlDevice_t)(uintptr_t)(dev + 1);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned len) {
    NVML_DEVICE("nvmlDeviceGetUUID", h);
    char t[64];
    uuid_text(dev, t, sizeof t);
    if (strlen(t) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(uuid, t, strlen(t) + 1);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t h, int *current, int *pending) {
    NVML_DEVICE("nvmlDeviceGetEccMode", h);
    *current = *pending = number("ECC", dev, 1) != 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t h, int *mode) {
    NVML_DEVICE("nvmlDeviceGetPersistenceMode", h);
    *mode = number("PERSISTENCE", dev, 1) != 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned *current, unsigned *pending) {
    NVML_DEVICE("nvmlDeviceGetMigMode", h);
    *current = *pending = number("MIG", dev, 0) != 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t h, unsigned *milliwatts) {
    NVML_DEVICE("nvmlDeviceGetEnforcedPowerLimit", h);
    *milliwatts = (unsigned)number("POWER_W", dev, 700) * 1000u;
    return NVML_SUCCESS;
}

/* nvmlClockType_t: 0 graphics, 1 SM, 2 memory, 3 video. */
static nvmlReturn_t clock_of(int dev, int type, int max, unsigned *mhz) {
    if (type == 1)
        *mhz = (unsigned)(max ? number("MAX_SM_MHZ", dev, 1980) : number("SM_MHZ", dev, 1980));
    else if (type == 2)
        *mhz = (unsigned)(max ? number("MAX_MEM_MHZ", dev, 3201) : number("MEM_MHZ", dev, 3201));
    else
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t h, int type, unsigned *mhz) {
    NVML_DEVICE("nvmlDeviceGetMaxClockInfo", h);
    return clock_of(dev, type, 1, mhz);
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t h, int type, unsigned *mhz) {
    NVML_DEVICE("nvmlDeviceGetClockInfo", h);
    return clock_of(dev, type, 0, mhz);
}

EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t h, char *version, unsigned len) {
    NVML_DEVICE("nvmlDeviceGetVbiosVersion", h);
    const char *v = text("VBIOS", dev, "96.00.FA.CE.00");
    if (strlen(v) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(version, v, strlen(v) + 1);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned *celsius) {
    NVML_DEVICE("nvmlDeviceGetTemperature", h);
    if (sensor != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *celsius = (unsigned)number("TEMP_C", dev, 31);
    return NVML_SUCCESS;
}

/* Other processes get pids 4000000 + k: never this process. The caller's own process is
 * listed too when FAKEGPU_OWN_PROC=1, which repro must not count. */
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned *count,
                                                          nvmlProcessInfo_t *infos) {
    NVML_DEVICE("nvmlDeviceGetComputeRunningProcesses_v3", h);
    unsigned others = (unsigned)number("OTHER_PROCS", dev, 0);
    unsigned own = number("OWN_PROC", dev, 0) != 0;
    unsigned n = others + own;
    if (!infos || *count < n) {
        *count = n;
        return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned k = 0; k < n; k++) {
        memset(&infos[k], 0, sizeof infos[k]);
        infos[k].pid = k < others ? 4000000u + k : (unsigned)getpid();
        infos[k].usedGpuMemory = 1u << 20;
    }
    *count = n;
    return NVML_SUCCESS;
}
