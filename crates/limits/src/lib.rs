//! keepcount-limits: counting and limiting for services under load.

pub mod clock;
