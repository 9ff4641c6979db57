/*
 * internals.c - the one file of the extension that reads CPython's internal structures,
 * for 3.11 and 3.12 only (compiled against the very interpreter's headers, as every
 * file here is).
 *
 * The sampler asks the main thread to sample itself with Py_AddPendingCall. On 3.11 and
 * 3.12 that call sets the interpreter's eval breaker only when the calling thread is
 * the main thread, which the sampler's is not; the main thread then notices the request
 * only when it next takes the GIL, after it blocked, too late (sampler.c explains why
 * that matters). ppk_py_wake_main sets the eval breaker itself, and only while the main
 * thread holds the GIL: the main thread then runs the pending call at its next bytecode
 * boundary and recomputes the eval breaker as it does so. (Were the main thread to
 * release the GIL in between, the thread that takes it would find the breaker set with
 * nothing to do for it, and check it until the next forced switch recomputes it: a few
 * ms of slower bytecode dispatch, rarely.) CPython 3.13 wakes the interpreter itself.
 */
#include <patchlevel.h>
#if PY_VERSION_HEX < 0x030D0000
#define Py_BUILD_CORE 1 /* for the internal headers below */
#endif
#include "binding.h"

#if PY_VERSION_HEX < 0x030D0000
#include "internal/pycore_interp.h"
#include "internal/pycore_runtime.h"

void ppk_py_wake_main(PyInterpreterState *interp, const PyThreadState *main_ts) {
#if PY_VERSION_HEX >= 0x030C0000
    struct _gil_runtime_state *gil = interp->ceval.gil;
#else
    struct _gil_runtime_state *gil = &_PyRuntime.ceval.gil;
#endif
    if (!main_ts || !_Py_atomic_load_relaxed(&gil->locked) ||
        (const PyThreadState *)_Py_atomic_load_relaxed(&gil->last_holder) != main_ts)
        return;
    _Py_atomic_store_relaxed(&interp->ceval.eval_breaker, 1);
}
#else
void ppk_py_wake_main(PyInterpreterState *interp, const PyThreadState *main_ts) {
    (void)interp;
    (void)main_ts;
}
#endif
