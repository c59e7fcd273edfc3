//! Passes the link arguments a Node addon needs (undefined napi symbols on macOS, the module
//! definition on Windows) to the cdylib.

fn main() {
    napi_build::setup();
}
