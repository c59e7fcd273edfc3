//! Test support: the runtime the unit tests poll their futures on.

use std::future::Future;

/// Runs `future` to completion on a fresh current-thread tokio runtime with its time driver on
/// (the tokio-backed timeouts need it; the fast ones ignore it).
pub(crate) fn block_on<O>(future: impl Future<Output = O>) -> O {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
        .block_on(future)
}
