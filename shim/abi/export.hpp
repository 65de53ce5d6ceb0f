// The one way the shim makes a symbol visible to the program: everything
// else in libasyncshim.so is hidden (-fvisibility=hidden, and the linker's
// export list generated from cuda/api_table.def).
#pragma once

#define ASYNCSHIM_EXPORT extern "C" __attribute__((visibility("default")))
