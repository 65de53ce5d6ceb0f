// The exported dlsym. A statically linked CUDA runtime dlopen()s libcuda.so.1
// and asks dlsym for cuGetProcAddress_v2; frameworks dlsym driver functions
// directly. For a lookup in an explicit library handle, the real result is
// returned unless it is one of the driver functions the shim replaces
// (cuda/api_table.def), in which case the shim's entry point is.
//
// RTLD_NEXT and RTLD_DEFAULT lookups depend on *who calls* dlsym: glibc takes
// the caller from the return address. A C wrapper that called the real dlsym
// would make every RTLD_NEXT lookup relative to libasyncshim.so. So those two
// handles are passed on with a tail jump, which leaves the caller's return
// address in place: they resolve exactly as without the shim (and an
// RTLD_DEFAULT lookup of a replaced name finds the shim's export, as any
// global lookup does).
#include "abi/export.hpp"
#include "core/lookup_redirect.hpp"
#include "cuda/loader.hpp"

#include <dlfcn.h>

extern "C" __attribute__((used)) void* asyncshim_dlsym_explicit(void* handle, char const* name) noexcept
{
  void* found = asyncshim::shim::real_dlsym(handle, name);
  return asyncshim::shim::replacement_for_lookup(name, found);
}

// RTLD_NEXT and RTLD_DEFAULT lookups are looked at by name before the jump
// (the answer is not seen): one of a driver function the shim would not see
// called ends followed submissions. Runs for every such lookup, also those a
// sanitizer's runtime makes while it starts, before it can serve
// instrumented code (ThreadSanitizer's crashes on any call into it then, even
// a function's entry): only the first three characters are read here, without
// instrumentation, and only a driver function's name (cu<Capital>) goes on.
extern "C" __attribute__((used, no_sanitize("address", "undefined", "thread"))) void asyncshim_dlsym_global(
  void* handle, char const* name) noexcept
{
  if (name == nullptr || name[0] != 'c' || name[1] != 'u' || name[2] < 'A' || name[2] > 'Z') { return; }
  asyncshim::shim::global_lookup(name, handle == RTLD_NEXT);
}

#if defined(__x86_64__)
// dlsym(handle, name): handle in %rdi, name in %rsi. RTLD_NEXT is -1,
// RTLD_DEFAULT is 0. call_keeping_arguments calls a C function and keeps
// both for the jump after it (the stack aligned for the call).
asm(R"(
    .macro call_keeping_arguments function
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    call \function
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    .endm
    .text
    .globl dlsym
    .type dlsym, @function
dlsym:
    .cfi_startproc
    endbr64
    cmpq $-1, %rdi
    je 1f
    testq %rdi, %rdi
    je 1f
    jmp asyncshim_dlsym_explicit
1:
    call_keeping_arguments asyncshim_dlsym_global
    movq asyncshim_real_dlsym_pointer(%rip), %rax
    testq %rax, %rax
    jz 2f
    jmp *%rax
2:
    call_keeping_arguments asyncshim_resolve_real_dlsym
    testq %rax, %rax
    jz 3f
    jmp *%rax
3:
    xorl %eax, %eax
    ret
    .cfi_endproc
    .size dlsym, .-dlsym
)");
#else
// Other architectures: a plain wrapper. RTLD_NEXT lookups made through it
// resolve relative to libasyncshim.so (README, "Known limits").
ASYNCSHIM_EXPORT void* dlsym(void* handle, char const* name)
{
  if (handle == RTLD_NEXT || handle == RTLD_DEFAULT) {
    asyncshim_dlsym_global(handle, name);
    return asyncshim::shim::real_dlsym(handle, name);
  }
  return asyncshim_dlsym_explicit(handle, name);
}
#endif
