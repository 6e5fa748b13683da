// A software stand-in for libcuda.so: the part of the CUDA driver API that lazybatch's CUDA
// device calls (through cudarc), implemented on the host so that the unmodified CUDA device can
// run in CI, where there is no GPU. It is a test instrument, not a GPU: it reports itself as
// "lazybatch software CUDA stand-in", executes kernels/*.cu compiled as host C++ (shim.h), and
// its event timings measure the host. What it checks that a plain CPU run cannot:
//  - every launch names a kernel that the loaded PTX module really contains;
//  - launch shapes: block size <= 1024, dynamic shared memory <= 48 KiB;
//  - device memory: every allocation starts 16-byte aligned and ends at most 15 bytes before a
//    guard page (at it when its size is a multiple of 16), so a kernel that reads or writes past
//    the end of a buffer faults (the handler names the kernel); copies must stay inside one
//    allocation;
//  - barriers and warp shuffles behave as on the GPU (threads of a block run as fibers); a
//    shuffle in a block that is not whole warps, one that reads a lane outside its warp or a
//    lane that has exited, and one that only part of a warp reaches abort with the kernel's
//    name instead of silently computing something;
//  - stream capture and CUDA graphs: while the stream captures, launches, device copies, memsets
//    and cuBLAS calls are checked as at submission and recorded instead of run; a graph launch
//    runs the recording in order. A synchronization or a device->host copy during capture fails
//    and invalidates the capture, as on a GPU.
// Fibers switch with a few instructions of x86-64 assembly (ucontext's swapcontext makes a
// system call per switch, which made attention-heavy models take minutes), so the stand-in
// builds on x86-64 only.
#include "shim.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

extern const lb_kernel lb_kernels[];
extern const int lb_nkernels;

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void* CUcontext;
typedef void* CUstream;
typedef void* CUevent;
typedef void* CUmodule;
typedef void* CUfunction;

enum {
    OK = 0,
    INVALID_VALUE = 1,
    OUT_OF_MEMORY = 2,
    INVALID_IMAGE = 200,
    INVALID_HANDLE = 400,
    NOT_FOUND = 500,
    LAUNCH_FAILED = 719,
};

static const char* const DEVICE_NAME = "lazybatch software CUDA stand-in (tests only, not a GPU)";

lb_dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace {

std::mutex g_lock;  // one launch at a time: the shim's block state is global
int g_ctx_token;
CUcontext g_current = nullptr;

// ---- device memory: host pages, each allocation ending at a PROT_NONE guard page ----

struct Alloc {
    void* base;
    size_t total;
    size_t size;
};
std::map<CUdeviceptr, Alloc> g_allocs;
size_t g_live_bytes = 0;
unsigned long long g_allocations = 0;  // every allocation ever made
// For tests: calls made so far of the kinds that cost a real GPU host time per node (read by
// lb_stand_in_counts): kernel launches, host->device copies, device->host copies, blocking syncs
// (stream, event and context synchronizations).
unsigned long long g_launches = 0, g_htod = 0, g_dtoh = 0, g_syncs = 0;
// Graph launches, and the operations recorded into graphs (never counted as launches).
unsigned long long g_graph_launches = 0, g_recorded = 0;
void count(unsigned long long& c) {
    std::lock_guard<std::mutex> l(g_lock);
    c += 1;
}

// ---- stream capture: one capture at a time (lazybatch uses one stream) ----

struct Graph {
    std::vector<std::function<void()>> ops;
};
Graph* g_capture = nullptr;  // the graph being recorded, while a stream captures
CUstream g_capture_stream = nullptr;
bool g_capture_invalid = false;
enum { CAPTURE_UNSUPPORTED = 900, CAPTURE_INVALIDATED = 901, ILLEGAL_STATE = 401 };

// True (and the op recorded) while a stream captures.
bool record(std::function<void()> op) {
    if (!g_capture) return false;
    g_capture->ops.push_back(std::move(op));
    count(g_recorded);
    return true;
}

// An operation that a capture cannot hold (a synchronization, a copy to the host): it fails and
// invalidates the capture.
bool refused_in_capture() {
    if (!g_capture) return false;
    g_capture_invalid = true;
    return true;
}

const size_t PAGE = 4096;
const size_t TOTAL_BYTES = (size_t)16 << 30;

CUresult alloc(CUdeviceptr* p, size_t bytes) {
    // 16-byte aligned starts, as the libraries' vectorized accesses need (a GPU gives 256): the
    // guard page is at most 15 bytes past the end
    size_t size = (bytes + 15) / 16 * 16;
    if (size == 0) size = 16;
    size_t pages = (size + PAGE - 1) / PAGE;
    size_t total = (pages + 1) * PAGE;
    void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
    char* guard = static_cast<char*>(base) + pages * PAGE;
    mprotect(guard, PAGE, PROT_NONE);
    CUdeviceptr ptr = reinterpret_cast<CUdeviceptr>(guard - size);
    std::lock_guard<std::mutex> l(g_lock);
    g_allocs[ptr] = Alloc{base, total, bytes};
    g_live_bytes += bytes;
    g_allocations += 1;
    *p = ptr;
    return OK;
}

CUresult release(CUdeviceptr p) {
    std::lock_guard<std::mutex> l(g_lock);
    auto it = g_allocs.find(p);
    if (it == g_allocs.end()) return INVALID_VALUE;
    munmap(it->second.base, it->second.total);
    g_live_bytes -= it->second.size;
    g_allocs.erase(it);
    return OK;
}

// True when [p, p + bytes) lies inside one allocation.
bool inside(CUdeviceptr p, size_t bytes) {
    std::lock_guard<std::mutex> l(g_lock);
    auto it = g_allocs.upper_bound(p);
    if (it == g_allocs.begin()) return false;
    --it;
    return p >= it->first && p + bytes <= it->first + it->second.size;
}

CUresult copy(void* dst, const void* src, size_t bytes, CUdeviceptr dev_a, CUdeviceptr dev_b) {
    if (dev_a && !inside(dev_a, bytes)) {
        std::fprintf(stderr, "cuda-stand-in: copy of %zu bytes outside the allocation at %#llx\n", bytes, dev_a);
        return INVALID_VALUE;
    }
    if (dev_b && !inside(dev_b, bytes)) {
        std::fprintf(stderr, "cuda-stand-in: copy of %zu bytes outside the allocation at %#llx\n", bytes, dev_b);
        return INVALID_VALUE;
    }
    std::memmove(dst, src, bytes);
    return OK;
}

// ---- modules and kernels ----

struct Module {
    std::set<std::string> entries;  // `.entry NAME(` in the PTX
};
struct Function {
    const lb_kernel* k;
};
std::vector<Function*> g_functions;

// LB_STAND_IN_STATS=1: per-kernel launches, blocks and host seconds, printed at exit.
struct Stat {
    unsigned long long launches = 0, blocks = 0, threads = 0;
    double seconds = 0.0;
};
std::map<std::string, Stat> g_stats;
void print_stats() {
    std::fprintf(stderr, "%-18s %10s %12s %14s %9s\n", "kernel", "launches", "blocks", "threads", "seconds");
    for (auto& [k, s] : g_stats)
        std::fprintf(stderr, "%-18s %10llu %12llu %14llu %9.3f\n", k.c_str(), s.launches, s.blocks, s.threads, s.seconds);
}
bool stats_on() {
    static int on = -1;
    if (on < 0) {
        const char* e = std::getenv("LB_STAND_IN_STATS");
        on = e && e[0] == '1';
        if (on) std::atexit(print_stats);
    }
    return on;
}

const char* volatile g_running = nullptr;  // the kernel being executed, for the fault handler

void on_fault(int sig) {
    const char* k = g_running;
    const char* a = "cuda-stand-in: memory fault (out-of-bounds device access) in kernel ";
    ssize_t r = write(2, a, std::strlen(a));
    const char* none = "(none: host code or a cuBLAS call)";
    r = write(2, k ? k : none, std::strlen(k ? k : none));
    r = write(2, "\n", 1);
    (void)r;
    signal(sig, SIG_DFL);
}

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "cuda-stand-in: kernel %s: %s\n", g_running ? g_running : "?", what);
    std::abort();
}

// ---- threads of a block: plain calls, or fibers for kernels that synchronize ----

enum State { READY, WAIT_BLOCK, WAIT_WARP, DONE };
struct Fiber {
    void* sp;  // saved stack pointer while suspended
    State st;
    unsigned shuffles;  // shuffles done (selects the exchange buffer)
};
// Not a power of two, so that the fibers' stack tops do not all fall in the same cache sets.
const size_t STACK = 24 * 1024 + 7 * 64;
std::vector<Fiber> g_fibers;
std::vector<char> g_stacks;
std::vector<float> g_xchg;
std::vector<char> g_dyn_shared;
void* g_sched_sp = nullptr;
int g_cur = -1;  // running fiber, -1 when threads run as plain calls
void (*g_run)(void**) = nullptr;
void** g_params = nullptr;

}  // namespace

#if !defined(__x86_64__)
#error "the software CUDA stand-in switches fibers with x86-64 assembly"
#endif
// lb_switch(save, to): saves the callee-saved registers on the current stack, stores the stack
// pointer in *save, switches to `to` and restores the registers saved there.
extern "C" void lb_switch(void** save, void* to);
asm(R"(
    .text
    .globl lb_switch
    .type lb_switch, @function
lb_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size lb_switch, .-lb_switch
)");

namespace {

void set_thread(unsigned t) {
    if (blockDim.y == 1 && blockDim.z == 1) {
        threadIdx = {t, 0, 0};
        return;
    }
    threadIdx.x = t % blockDim.x;
    threadIdx.y = (t / blockDim.x) % blockDim.y;
    threadIdx.z = t / (blockDim.x * blockDim.y);
}

[[noreturn]] void fiber_entry() {
    g_run(g_params);
    g_fibers[g_cur].st = DONE;
    lb_switch(&g_fibers[g_cur].sp, g_sched_sp);
    std::abort();  // a finished fiber is never resumed
}

void wait(State s) {
    if (g_cur < 0) fail("synchronizes but was classed barrier-free");
    Fiber& f = g_fibers[g_cur];
    f.st = s;
    lb_switch(&f.sp, g_sched_sp);
}

// A fresh fiber's stack: six zero registers for lb_switch to pop, then fiber_entry as the
// return address, then a zero fake return address so that fiber_entry starts with the stack
// aligned as after a call.
void* fresh_stack(char* base) {
    uintptr_t top = (reinterpret_cast<uintptr_t>(base) + STACK) & ~uintptr_t(15);
    void** sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;
    *--sp = reinterpret_cast<void*>(&fiber_entry);
    for (int r = 0; r < 6; ++r) *--sp = nullptr;
    return sp;
}

void run_block_fibers(unsigned n) {
    g_fibers.resize(n);
    if (g_stacks.size() < n * STACK) g_stacks.resize(n * STACK);
    for (unsigned t = 0; t < n; ++t) g_fibers[t] = Fiber{fresh_stack(&g_stacks[t * STACK]), READY, 0};
    for (;;) {
        for (unsigned t = 0; t < n; ++t) {
            if (g_fibers[t].st != READY) continue;
            g_cur = (int)t;
            set_thread(t);
            lb_switch(&g_sched_sp, g_fibers[t].sp);
        }
        // every thread is now waiting or done: release whole warps first, then the block
        bool released = false;
        for (unsigned w = 0; w * 32 < n; ++w) {
            unsigned warp_wait = 0, live = 0;
            for (unsigned t = w * 32; t < n && t < w * 32 + 32; ++t) {
                State s = g_fibers[t].st;
                live += s != DONE;
                warp_wait += s == WAIT_WARP;
            }
            if (warp_wait == 0) continue;
            if (warp_wait != live) fail("a warp shuffle that not every live thread of the warp reaches");
            for (unsigned t = w * 32; t < n && t < w * 32 + 32; ++t)
                if (g_fibers[t].st == WAIT_WARP) g_fibers[t].st = READY;
            released = true;
        }
        if (released) continue;
        bool any = false;
        for (unsigned t = 0; t < n; ++t)
            if (g_fibers[t].st == WAIT_BLOCK) {
                g_fibers[t].st = READY;
                any = true;
            }
        if (!any) break;  // all done
    }
    g_cur = -1;
}

}  // namespace

void __syncthreads() { wait(WAIT_BLOCK); }

float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
    if (g_cur < 0) fail("shuffles but was classed barrier-free");
    if (mask != 0xffffffffu) fail("partial-mask shuffles are not modeled");
    unsigned t = threadIdx.x, n = blockDim.x;
    if (n % 32 != 0) fail("shuffle in a block that is not a whole number of warps");
    unsigned p = t ^ (unsigned)lane_mask;
    if (p >= n || p / 32 != t / 32) fail("shuffle reads a lane outside the warp");
    // Two exchange buffers used alternately: one warp barrier per shuffle suffices, because a
    // lane can only write the buffer again after every lane has passed the next barrier, that
    // is, after every lane has read it.
    Fiber& f = g_fibers[g_cur];
    float* x = &g_xchg[(f.shuffles++ & 1) * n];
    x[t] = v;
    wait(WAIT_WARP);
    // the partner has made this shuffle too unless it exited before it
    if (g_fibers[p].shuffles < f.shuffles) fail("shuffle reads a lane that has exited");
    return x[p];
}

void* lb_dynamic_shared() { return g_dyn_shared.data(); }

extern "C" {

// For tests: device allocations made so far (a real driver has no such symbol).
unsigned long long lb_stand_in_allocations() {
    std::lock_guard<std::mutex> l(g_lock);
    return g_allocations;
}

// For tests: out[0..4] = kernel launches, host->device copies, device->host copies and blocking
// synchronizations (cuStreamSynchronize, cuEventSynchronize, cuCtxSynchronize) made so far.
void lb_stand_in_counts(unsigned long long* out) {
    std::lock_guard<std::mutex> l(g_lock);
    out[0] = g_launches;
    out[1] = g_htod;
    out[2] = g_dtoh;
    out[3] = g_syncs;
}

// For tests: out[0..2] = graph launches, and operations recorded into graphs so far.
void lb_stand_in_graph_counts(unsigned long long* out) {
    std::lock_guard<std::mutex> l(g_lock);
    out[0] = g_graph_launches;
    out[1] = g_recorded;
}

// For the cuBLAS stand-in: true when [p, p + bytes) lies inside one allocation.
bool lb_stand_in_inside(CUdeviceptr p, size_t bytes) { return inside(p, bytes); }

CUresult cuInit(unsigned) {
    static bool once = false;
    if (!once) {
        once = true;
        struct sigaction sa;
        std::memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fault;
        sa.sa_flags = SA_RESETHAND | SA_ONSTACK;
        sigaction(SIGSEGV, &sa, nullptr);
        sigaction(SIGBUS, &sa, nullptr);
    }
    return OK;
}
// LB_STAND_IN_DRIVER_VERSION pretends an older (or newer) driver, e.g. 12080 for CUDA 12.8.
CUresult cuDriverGetVersion(int* v) {
    const char* e = std::getenv("LB_STAND_IN_DRIVER_VERSION");
    *v = e ? std::atoi(e) : 13000;
    return OK;
}
CUresult cuDeviceGetCount(int* n) {
    *n = 1;
    return OK;
}
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
    if (ordinal != 0) return INVALID_VALUE;
    *d = 0;
    return OK;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice) {
    std::snprintf(name, (size_t)len, "%s", DEVICE_NAME);
    return OK;
}
CUresult cuDeviceTotalMem_v2(size_t* b, CUdevice) {
    *b = TOTAL_BYTES;
    return OK;
}
CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
    std::lock_guard<std::mutex> l(g_lock);
    *free = TOTAL_BYTES - g_live_bytes;
    *total = TOTAL_BYTES;
    return OK;
}
CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice) {
    switch (attr) {
        case 1: *v = 1024; break;         // max threads per block
        case 8: *v = 48 * 1024; break;    // shared memory per block
        case 10: *v = 32; break;          // warp size
        case 16: *v = 1; break;           // multiprocessors
        case 75: *v = 9; break;           // compute capability: compile PTX for sm_90
        case 76: *v = 0; break;
        default: *v = 0;                  // incl. 115: no memory pools (synchronous allocation)
    }
    return OK;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice) {
    *c = &g_ctx_token;
    return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return OK; }
CUresult cuCtxSetCurrent(CUcontext c) {
    g_current = c;
    return OK;
}
CUresult cuCtxGetCurrent(CUcontext* c) {
    *c = g_current;
    return OK;
}
CUresult cuCtxPushCurrent_v2(CUcontext c) { return cuCtxSetCurrent(c); }
CUresult cuCtxPopCurrent_v2(CUcontext* c) {
    if (c) *c = g_current;
    return OK;
}
CUresult cuCtxGetDevice(CUdevice* d) {
    *d = 0;
    return OK;
}
CUresult cuCtxSynchronize() {
    if (refused_in_capture()) return CAPTURE_UNSUPPORTED;
    count(g_syncs);
    return OK;
}

CUresult cuStreamCreate(CUstream* s, unsigned) {
    *s = new int(0);
    return OK;
}
CUresult cuStreamDestroy_v2(CUstream s) {
    delete static_cast<int*>(s);
    return OK;
}
CUresult cuStreamSynchronize(CUstream) {
    if (refused_in_capture()) return CAPTURE_UNSUPPORTED;
    count(g_syncs);
    return OK;
}
CUresult cuStreamQuery(CUstream) { return OK; }
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned) { return OK; }

// Events hold the host time of their record (work runs synchronously at submission).
CUresult cuEventCreate(CUevent* e, unsigned) {
    *e = new double(0.0);
    return OK;
}
CUresult cuEventDestroy_v2(CUevent e) {
    delete static_cast<double*>(e);
    return OK;
}
CUresult cuEventRecord(CUevent e, CUstream) {
    using namespace std::chrono;
    *static_cast<double*>(e) = duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
    return OK;
}
CUresult cuEventSynchronize(CUevent) {
    if (refused_in_capture()) return CAPTURE_UNSUPPORTED;
    count(g_syncs);
    return OK;
}
CUresult cuEventQuery(CUevent) { return OK; }
CUresult cuEventElapsedTime_v2(float* ms, CUevent a, CUevent b) {
    *ms = (float)(*static_cast<double*>(b) - *static_cast<double*>(a));
    return OK;
}
CUresult cuEventElapsedTime(float* ms, CUevent a, CUevent b) { return cuEventElapsedTime_v2(ms, a, b); }

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) { return alloc(p, bytes); }
CUresult cuMemAllocAsync(CUdeviceptr* p, size_t bytes, CUstream) { return alloc(p, bytes); }
CUresult cuMemFree_v2(CUdeviceptr p) { return release(p); }
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream) { return release(p); }
// Page-locked host memory (cuMemHostAlloc): plain host memory here, remembered so that a copy
// that starts inside it must also end inside it.
static std::map<const char*, size_t> g_host_allocs;
static bool host_copy_ok(const void* s, size_t n) {
    std::lock_guard<std::mutex> g(g_lock);
    const char* p = static_cast<const char*>(s);
    auto it = g_host_allocs.upper_bound(p);
    if (it == g_host_allocs.begin()) return true;
    --it;
    if (p >= it->first + it->second) return true;  // not page-locked memory
    return p + n <= it->first + it->second;
}
CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned) {
    size_t rounded = (bytes + 63) / 64 * 64;
    *p = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!*p) return OUT_OF_MEMORY;
    std::lock_guard<std::mutex> g(g_lock);
    g_host_allocs[static_cast<const char*>(*p)] = bytes;
    return OK;
}
CUresult cuMemAllocHost_v2(void** p, size_t bytes) { return cuMemHostAlloc(p, bytes, 0); }
CUresult cuMemFreeHost(void* p) {
    {
        std::lock_guard<std::mutex> g(g_lock);
        if (g_host_allocs.erase(static_cast<const char*>(p)) == 0) return INVALID_VALUE;
    }
    std::free(p);
    return OK;
}
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) {
    if (!inside(p, n)) return INVALID_VALUE;
    auto run = [p, v, n] { std::memset(reinterpret_cast<void*>(p), v, n); };
    if (!record(run)) run();
    return OK;
}
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream) { return cuMemsetD8_v2(p, v, n); }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void* s, size_t n) {
    if (!inside(d, n)) return copy(nullptr, s, n, d, 0);
    if (!host_copy_ok(s, n)) {
        std::fprintf(stderr, "stand-in: a host-to-device copy of %zu bytes runs past its page-locked buffer\n", n);
        return INVALID_VALUE;
    }
    // a captured upload reads the host memory when the graph runs
    auto run = [d, s, n] {
        count(g_htod);
        copy(reinterpret_cast<void*>(d), s, n, d, 0);
    };
    if (!record(run)) run();
    return OK;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* s, size_t n, CUstream) { return cuMemcpyHtoD_v2(d, s, n); }
CUresult cuMemcpyDtoH_v2(void* d, CUdeviceptr s, size_t n) {
    if (refused_in_capture()) return CAPTURE_UNSUPPORTED;
    count(g_dtoh);
    return copy(d, reinterpret_cast<const void*>(s), n, s, 0);
}
CUresult cuMemcpyDtoHAsync_v2(void* d, CUdeviceptr s, size_t n, CUstream) { return cuMemcpyDtoH_v2(d, s, n); }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) {
    if (!inside(d, n) || !inside(s, n))
        return copy(reinterpret_cast<void*>(d), reinterpret_cast<const void*>(s), n, d, s);
    auto run = [d, s, n] { copy(reinterpret_cast<void*>(d), reinterpret_cast<const void*>(s), n, d, s); };
    if (!record(run)) run();
    return OK;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream) { return cuMemcpyDtoD_v2(d, s, n); }

// The PTX is not executed (the host-compiled kernels are), but its entry points are checked:
// a function can only be had from a module whose PTX defines it.
CUresult cuModuleLoadData(CUmodule* m, const void* image) {
    const char* ptx = static_cast<const char*>(image);
    if (!ptx || !std::strstr(ptx, ".version") || !std::strstr(ptx, ".target")) return INVALID_IMAGE;
    Module* mod = new Module;
    const char* p = ptx;
    while ((p = std::strstr(p, ".entry "))) {
        p += 7;
        const char* e = p;
        while (*e && *e != '(' && *e != ' ' && *e != '\n') ++e;
        mod->entries.insert(std::string(p, e));
    }
    *m = mod;
    return OK;
}
CUresult cuModuleUnload(CUmodule m) {
    delete static_cast<Module*>(m);
    return OK;
}
CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
    Module* mod = static_cast<Module*>(m);
    if (!mod->entries.count(name)) return NOT_FOUND;
    for (int i = 0; i < lb_nkernels; ++i) {
        if (std::strcmp(lb_kernels[i].name, name) == 0) {
            Function* fn = new Function{&lb_kernels[i]};
            std::lock_guard<std::mutex> l(g_lock);
            g_functions.push_back(fn);
            *f = fn;
            return OK;
        }
    }
    std::fprintf(stderr, "cuda-stand-in: the PTX defines %s but the host build has no such kernel\n", name);
    return NOT_FOUND;
}
CUresult cuFuncGetAttribute(int* v, int, CUfunction) {
    *v = 0;
    return OK;
}
CUresult cuFuncSetAttribute(CUfunction, int, int) { return OK; }

}  // extern "C"

namespace {

// Runs a checked launch now.
void launch_now(const lb_kernel* k, lb_dim3 grid, lb_dim3 block, unsigned shared, void** params) {
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    std::lock_guard<std::mutex> l(g_lock);
    auto t0 = std::chrono::steady_clock::now();
    g_running = k->name;
    g_dyn_shared.assign(shared, 0);
    g_xchg.assign(2 * threads, 0.0f);
    gridDim = grid;
    blockDim = block;
    g_run = k->run;
    g_params = params;
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                blockIdx = {x, y, z};
                if (k->cooperative) {
                    run_block_fibers((unsigned)threads);
                } else {
                    for (unsigned t = 0; t < threads; ++t) {
                        set_thread(t);
                        k->run(params);
                    }
                }
            }
    g_running = nullptr;
    if (stats_on()) {
        Stat& st = g_stats[k->name];
        st.launches += 1;
        st.blocks += (unsigned long long)grid.x * grid.y * grid.z;
        st.threads += (unsigned long long)grid.x * grid.y * grid.z * threads;
        st.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
}

}  // namespace

extern "C" {

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream, void** params, void** extra) {
    if (!f || extra) return INVALID_VALUE;
    const lb_kernel* k = static_cast<Function*>(f)->k;
    unsigned long long threads = (unsigned long long)bx * by * bz;
    if (threads == 0 || threads > 1024 || gx == 0 || gy == 0 || gz == 0) {
        std::fprintf(stderr, "cuda-stand-in: %s launched with block %ux%ux%u grid %ux%ux%u\n", k->name, bx, by, bz,
                     gx, gy, gz);
        return INVALID_VALUE;
    }
    if (shared > 48 * 1024) {
        std::fprintf(stderr, "cuda-stand-in: %s asks for %u bytes of dynamic shared memory (limit 48 KiB)\n",
                     k->name, shared);
        return INVALID_VALUE;
    }
    lb_dim3 grid{gx, gy, gz}, block{bx, by, bz};
    if (g_capture) {
        // a captured launch keeps its arguments' values (cuStreamBeginCapture)
        std::shared_ptr<void*> saved(k->save(params), k->drop);
        record([k, grid, block, shared, saved] { launch_now(k, grid, block, shared, saved.get()); });
        return OK;
    }
    count(g_launches);
    launch_now(k, grid, block, shared, params);
    return OK;
}

// ---- stream capture and graphs ----

CUresult cuStreamBeginCapture_v2(CUstream s, int /*mode*/) {
    if (g_capture) return ILLEGAL_STATE;
    // the legacy default stream cannot capture (an H100 answers so)
    if (s == nullptr) return CAPTURE_UNSUPPORTED;
    g_capture = new Graph;
    g_capture_stream = s;
    g_capture_invalid = false;
    return OK;
}
CUresult cuStreamEndCapture(CUstream s, void** graph) {
    if (!g_capture || s != g_capture_stream) return ILLEGAL_STATE;
    Graph* g = g_capture;
    g_capture = nullptr;
    if (g_capture_invalid) {
        delete g;
        *graph = nullptr;
        return CAPTURE_INVALIDATED;
    }
    *graph = g;
    return OK;
}
CUresult cuStreamIsCapturing(CUstream s, int* status) {
    *status = g_capture && s == g_capture_stream ? (g_capture_invalid ? 2 : 1) : 0;
    return OK;
}
// An executable graph is a copy of its template's recording (which shares the saved arguments).
CUresult cuGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long) {
    if (!graph) return INVALID_VALUE;
    *exec = new Graph(*static_cast<Graph*>(graph));
    return OK;
}
CUresult cuGraphUpload(void*, CUstream) { return OK; }
CUresult cuGraphLaunch(void* exec, CUstream) {
    if (!exec) return INVALID_VALUE;
    if (refused_in_capture()) return CAPTURE_UNSUPPORTED;
    count(g_graph_launches);
    for (auto& op : static_cast<Graph*>(exec)->ops) op();
    return OK;
}
CUresult cuGraphExecDestroy(void* exec) {
    delete static_cast<Graph*>(exec);
    return OK;
}
CUresult cuGraphDestroy(void* graph) {
    delete static_cast<Graph*>(graph);
    return OK;
}

// For the cuBLAS stand-in: records `run(arg)` into the capture (true), or returns false when no
// stream captures (the caller then runs it and frees `arg` itself); `drop(arg)` frees it with
// the graph.
bool lb_stand_in_record(void (*run)(void*), void* arg, void (*drop)(void*)) {
    if (!g_capture) return false;
    std::shared_ptr<void> a(arg, drop);
    return record([run, a] { run(a.get()); });
}

CUresult cuGetErrorString(CUresult e, const char** s) {
    switch (e) {
        case OK: *s = "no error"; break;
        case INVALID_VALUE: *s = "invalid argument (software CUDA stand-in)"; break;
        case INVALID_IMAGE: *s = "device kernel image is invalid (software CUDA stand-in)"; break;
        case NOT_FOUND: *s = "named symbol not found (software CUDA stand-in)"; break;
        default: *s = "error (software CUDA stand-in)";
    }
    return OK;
}
CUresult cuGetErrorName(CUresult e, const char** s) {
    switch (e) {
        case OK: *s = "CUDA_SUCCESS"; break;
        case INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
        case INVALID_IMAGE: *s = "CUDA_ERROR_INVALID_IMAGE"; break;
        case NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
        default: *s = "CUDA_ERROR_UNKNOWN";
    }
    return OK;
}

}  // extern "C"
