#define CATCH_CONFIG_MAIN
#include "engine/af_smc.hpp"

#include <catch2/catch.hpp>

// The runtime starts the engine through hooks, as the library's
// constructor gives them (preload/init.cpp).
namespace {
const bool g_engine_given = (usmc::runtime::set_engine(usmc::af_smc::engine_hooks()), true);
} // namespace
