"""Run at the start of every Python process of the vLLM test servers (``PYTHONPATH`` names this folder).

vLLM 0.32's CPU attention takes its AMX kernel for bf16 on a CPU that reports AMX tiles, but never asks the
Linux kernel for permission to use them (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``, which torch's
own AMX code does): the first bf16 request then dies of SIGILL. Asking here, in each process (the permission
does not survive ``exec``, and vLLM's workers are spawned), is what torch would do; on a CPU without AMX the
call fails and nothing changes.
"""

import contextlib
import ctypes
import platform

if platform.system() == "Linux" and platform.machine() == "x86_64":
    _SYS_ARCH_PRCTL = 158
    _ARCH_REQ_XCOMP_PERM = 0x1023
    _XFEATURE_XTILEDATA = 18
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA)
