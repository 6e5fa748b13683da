// What the library stand-ins (cublas.cpp, cublaslt.cpp, cudnn.cpp) ask of the driver stand-in
// (driver.cpp), found at run time in the libcuda.so already loaded: whether a range of "device"
// memory lies inside one allocation, and recording a call into the graph while the stream
// captures (so that a library call is checked at submission and run at the graph's launch).
#pragma once
#include <dlfcn.h>

#include <cstddef>
#include <cstring>
#include <functional>

namespace lb_link {

// Asks the driver stand-in whether [p, p + bytes) lies in one allocation.
inline bool inside(const void* p, size_t bytes) {
    typedef bool (*F)(unsigned long long, size_t);
    static F f = [] {
        void* lib = dlopen("libcuda.so", RTLD_NOW | RTLD_NOLOAD);
        return lib ? reinterpret_cast<F>(dlsym(lib, "lb_stand_in_inside")) : nullptr;
    }();
    return !f || f(reinterpret_cast<unsigned long long>(p), bytes);
}

// Runs `run` now, or records it when the stream captures.
inline void now_or_recorded(std::function<void()> run) {
    typedef bool (*R)(void (*)(void*), void*, void (*)(void*));
    static R r = [] {
        void* lib = dlopen("libcuda.so", RTLD_NOW | RTLD_NOLOAD);
        return lib ? reinterpret_cast<R>(dlsym(lib, "lb_stand_in_record")) : nullptr;
    }();
    typedef std::function<void()> F;
    F* f = new F(std::move(run));
    auto call = [](void* p) { (*static_cast<F*>(p))(); };
    auto drop = [](void* p) { delete static_cast<F*>(p); };
    if (r && r(call, f, drop)) return;
    (*f)();
    delete f;
}

// Rounds an f32 to TF32 (a 10-bit mantissa, to nearest even), as tensor cores read f32 inputs
// in TF32 mode.
inline float tf32(float x) {
    unsigned u;
    std::memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    float y;
    std::memcpy(&y, &u, sizeof y);
    return y;
}

}  // namespace lb_link
