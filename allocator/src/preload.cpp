// liblivealloc.so for LD_PRELOAD: the whole allocator, replacing malloc and operator new.
// LIVEALLOC_PRELOAD exports only the malloc ABI and the C++ operators (everything else is hidden
// by -fvisibility=hidden) and references libstdc++ weakly, so a C program does not load it.
#define LIVEALLOC_PRELOAD 1
#include "livealloc.h"

// The catch(...) in operator new's nothrow retry needs the C++ runtime only when a new-handler
// throws, and a program with a new-handler has libstdc++ loaded already. The assembler makes a
// symbol weak only when this file itself refers to it, hence the address taken below.
extern "C" int __gxx_personality_v0(...);
#pragma weak __cxa_begin_catch
#pragma weak __cxa_end_catch
#pragma weak __gxx_personality_v0
__attribute__((used)) static void* const livealloc_personality_ref =
    reinterpret_cast<void*>(&__gxx_personality_v0);
