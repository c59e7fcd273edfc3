//! keepcount-timeout: fast timeouts on a shared 10 ms tick.
