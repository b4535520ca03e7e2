#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""AF_SMC and IPPROTO_SMC programs run under usmc-run on a kernel without
SMC; SOL_SMC/SMC_LIMIT_HS follow the kernel's semantics, with the default
from the launcher or the config."""
import os

from harness import BIN, Env, check, finish

PROBE = os.path.join(BIN, "usmc-af-smc-probe")

with Env() as env:
    bare = env.run([PROBE, "--bare"])
    print("  without usmc:", bare.stdout.strip())

    for opts, expected, what in [((), "0", "default"), (("--limit-hs",), "1", "--limit-hs"),
                                 (("--no-limit-hs",), "0", "--no-limit-hs")]:
        r = env.run(env.wrap([PROBE, expected], *opts))
        print(r.stdout, end="")
        check(r.returncode == 0, f"AF_SMC probe passes ({what}, default limit_hs {expected})")

    cfg = os.path.join(env.dir, "limit.toml")
    with open(cfg, "w") as f:
        f.write("limit_smc_hs = true\n")
    r = env.run(env.wrap([PROBE, "1"], "--config", cfg))
    check(r.returncode == 0, "limit_smc_hs = true in the config is the default for new sockets")
    r = env.run(env.wrap([PROBE, "0"], "--config", cfg, "--no-limit-hs"))
    check(r.returncode == 0, "--no-limit-hs overrides the config")

    st = env.stats()
    check(st["sockets_af_smc"] >= 5 * 5, f"AF_SMC/IPPROTO_SMC sockets counted ({st['sockets_af_smc']})")
    check(st["sol_smc_set"] > 0 and st["sol_smc_get"] > 0, "SOL_SMC calls counted")
finish()
