/* A minimal NVTX tool for the tests: loaded through NVTX_INJECTION64_PATH, it records every range it
 * receives to $NVTX_RECORDER_DIR/nvtx-<pid>.log, one line per event.
 *
 * Written from the public NVTX documentation (the injection ABI: InitializeInjectionNvtx2, the
 * callbacks export table, module and callback ids, nvtxEventAttributes_t v2). No NVIDIA header is used.
 *
 * Lines:  S <domain> <id> <category> <tid> <payload> <message>    range start
 *         E <domain> <id> <tid>                                   range end
 *         P <domain> <category> <tid> <message>                   push
 *         O <domain> <tid>                                        pop
 *         C <domain> <category> <name>                            category name
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef void (*fnptr)(void);
typedef fnptr **fntable;                        /* array of pointers to function-pointer slots */
typedef const void *(*get_export_table_t)(uint32_t id);
typedef struct {
    size_t struct_size;
    int (*get_module_function_table)(int module, fntable *out_table, unsigned int *out_size);
} callbacks_table;

enum { ETID_CALLBACKS = 1, MODULE_CORE = 1, MODULE_CORE2 = 5 };
enum { CORE_MarkEx = 1, CORE_RangeStartEx = 4, CORE_RangeEnd = 7, CORE_RangePushEx = 8, CORE_RangePushA = 9,
       CORE_RangePop = 11 };
enum { CORE2_DomainMarkEx = 1, CORE2_DomainRangeStartEx = 2, CORE2_DomainRangeEnd = 3, CORE2_DomainRangePushEx = 4,
       CORE2_DomainRangePop = 5, CORE2_DomainNameCategoryA = 8, CORE2_DomainRegisterStringA = 10,
       CORE2_DomainCreateA = 12 };
enum { MSG_ASCII = 1, MSG_REGISTERED = 3 };

typedef struct {                               /* nvtxEventAttributes_t, version 2 layout */
    uint16_t version, size;
    uint32_t category;
    int32_t color_type;
    uint32_t color;
    int32_t payload_type;
    int32_t reserved0;
    union { uint64_t u64; int64_t i64; double d; uint32_t u32; int32_t i32; float f; } payload;
    int32_t message_type;
    union { const char *ascii; const void *unicode; const void *registered; } message;
} event_attr;

typedef struct { char name[128]; } domain_rec;  /* our domain handle */

static FILE *out;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t next_id = 1;
static domain_rec global_domain = {"NVTX"};

static long tid(void) { return (long)syscall(SYS_gettid); }
static const char *dname(const void *d) { return d ? ((const domain_rec *)d)->name : global_domain.name; }

static const char *msg(const event_attr *a) {
    if (!a) return "";
    if (a->message_type == MSG_ASCII && a->message.ascii) return a->message.ascii;
    if (a->message_type == MSG_REGISTERED && a->message.registered) return (const char *)a->message.registered;
    return "";
}

static long long payload(const event_attr *a) {
    if (!a) return -1;
    switch (a->payload_type) {
        case 1: return (long long)a->payload.u64;
        case 2: return (long long)a->payload.i64;
        case 4: return (long long)a->payload.u32;
        case 5: return (long long)a->payload.i32;
        default: return -1;
    }
}

static uint64_t start(const void *d, const event_attr *a) {
    pthread_mutex_lock(&lock);
    uint64_t id = next_id++;
    if (out) { fprintf(out, "S %s %llu %u %ld %lld %s\n", dname(d), (unsigned long long)id, a ? a->category : 0,
                       tid(), payload(a), msg(a)); fflush(out); }
    pthread_mutex_unlock(&lock);
    return id;
}
static void end(const void *d, uint64_t id) {
    pthread_mutex_lock(&lock);
    if (out) { fprintf(out, "E %s %llu %ld\n", dname(d), (unsigned long long)id, tid()); fflush(out); }
    pthread_mutex_unlock(&lock);
}
static int push(const void *d, const event_attr *a, const char *text) {
    pthread_mutex_lock(&lock);
    if (out) { fprintf(out, "P %s %u %ld %s\n", dname(d), a ? a->category : 0, tid(), a ? msg(a) : text); fflush(out); }
    pthread_mutex_unlock(&lock);
    return 0;
}
static int pop(const void *d) {
    pthread_mutex_lock(&lock);
    if (out) { fprintf(out, "O %s %ld\n", dname(d), tid()); fflush(out); }
    pthread_mutex_unlock(&lock);
    return 0;
}

/* core (global domain) */
static uint64_t c_start(const event_attr *a) { return start(NULL, a); }
static void c_end(uint64_t id) { end(NULL, id); }
static int c_push(const event_attr *a) { return push(NULL, a, ""); }
static int c_push_a(const char *m) { return push(NULL, NULL, m); }
static int c_pop(void) { return pop(NULL); }
static void c_mark(const event_attr *a) { (void)a; }
/* core2 (domains) */
static void d_mark(const void *d, const event_attr *a) { (void)d; (void)a; }
static uint64_t d_start(const void *d, const event_attr *a) { return start(d, a); }
static void d_end(const void *d, uint64_t id) { end(d, id); }
static int d_push(const void *d, const event_attr *a) { return push(d, a, ""); }
static int d_pop(const void *d) { return pop(d); }
static void d_name_category(const void *d, uint32_t cat, const char *name) {
    pthread_mutex_lock(&lock);
    if (out) { fprintf(out, "C %s %u %s\n", dname(d), cat, name ? name : ""); fflush(out); }
    pthread_mutex_unlock(&lock);
}
static const void *d_register_string(const void *d, const char *s) { (void)d; return strdup(s ? s : ""); }
static void *d_create(const char *name) {
    domain_rec *r = calloc(1, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name ? name : "");
    return r;
}

static void set_slot(fntable table, unsigned int size, unsigned int id, fnptr fn) {
    if (table && id < size && table[id]) *table[id] = fn;
}

int InitializeInjectionNvtx2(get_export_table_t get_export_table) {
    const char *dir = getenv("NVTX_RECORDER_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/nvtx-%d.log", dir ? dir : ".", (int)getpid());
    out = fopen(path, "a");
    const callbacks_table *cb = (const callbacks_table *)get_export_table(ETID_CALLBACKS);
    if (!cb || !cb->get_module_function_table) return 0;
    fntable t = NULL;
    unsigned int n = 0;
    if (cb->get_module_function_table(MODULE_CORE, &t, &n)) {
        set_slot(t, n, CORE_MarkEx, (fnptr)c_mark);
        set_slot(t, n, CORE_RangeStartEx, (fnptr)c_start);
        set_slot(t, n, CORE_RangeEnd, (fnptr)c_end);
        set_slot(t, n, CORE_RangePushEx, (fnptr)c_push);
        set_slot(t, n, CORE_RangePushA, (fnptr)c_push_a);
        set_slot(t, n, CORE_RangePop, (fnptr)c_pop);
    }
    if (cb->get_module_function_table(MODULE_CORE2, &t, &n)) {
        set_slot(t, n, CORE2_DomainMarkEx, (fnptr)d_mark);
        set_slot(t, n, CORE2_DomainRangeStartEx, (fnptr)d_start);
        set_slot(t, n, CORE2_DomainRangeEnd, (fnptr)d_end);
        set_slot(t, n, CORE2_DomainRangePushEx, (fnptr)d_push);
        set_slot(t, n, CORE2_DomainRangePop, (fnptr)d_pop);
        set_slot(t, n, CORE2_DomainNameCategoryA, (fnptr)d_name_category);
        set_slot(t, n, CORE2_DomainRegisterStringA, (fnptr)d_register_string);
        set_slot(t, n, CORE2_DomainCreateA, (fnptr)d_create);
    }
    return 1;
}
