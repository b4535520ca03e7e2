// SPDX-License-Identifier: MIT
#pragma once
// The engine as the preload sees it, and the one header of the engine that
// preload/ includes (preload/CMakeLists.txt checks that): the socket
// layer's calls (af_smc), the process-wide runtime, the socket options,
// and from engine/base the table of libc functions and the fd table.
#include "engine/base/fdtable.hpp"
#include "engine/base/sys.hpp"
#include "engine/sock/af_smc.hpp"
#include "engine/sock/runtime.hpp"
#include "engine/sock/sockopt.hpp"
