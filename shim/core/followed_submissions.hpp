// Whether the shim may rely on its submission hooks
// (docs/design.md#followed-submissions): a runtime that put work on streams through
// entry points of its own, not the driver functions the hooks replace, would
// leave that work unseen, and a block freed in order could be handed out
// while it runs.
#pragma once

namespace asyncshim::shim {

/// Checks once per process, before the first block is handed out, that work
/// the program's runtime puts on a stream reaches a submission hook: a host
/// function launched through the runtime on a stream of its own. When it does
/// not (or the check cannot be made), followed submissions end for the
/// process. Returns at once after the first call; other threads wait for
/// that call to finish. The caller holds the stream tracker's access(), with
/// no capture in progress, and the pool's device is current.
void check_runtime_submissions_followed() noexcept;

}  // namespace asyncshim::shim
