//! The Node binding of keepcount: adapts `keepcount-limits` (the count-min sketch and the rate)
//! and `keepcount-timeout` (the 10 ms deadline grid) to JavaScript with napi-rs.
//!
//! The binding only adapts: it converts JavaScript values ([`keys`], [`args`]), maps Rust errors
//! to JavaScript errors in one place ([`error`]) and otherwise calls the crates. The generated
//! `binding.js`/`binding.d.ts` are wrapped by `lib/native.ts` into the `Backend` interface that
//! the public TypeScript API uses; most users never touch these classes directly.
//!
//! Nothing here can abort Node: every exported function and method is compiled with napi-rs'
//! `catch_unwind`, arithmetic on JavaScript input is checked, and every error becomes a thrown
//! JavaScript error with a `code` from `lib/errors.ts`.

mod args;
mod error;
pub mod estimator;
mod keys;
pub mod limiter;
pub mod rate;
mod raw;
pub mod ticker;
