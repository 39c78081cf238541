//! The shipped binary keeps line tables for backtraces but compresses its debug sections
//! (the linker's `--compress-debug-sections=zlib`; std's backtraces read them): 50 MB -> 31 MB.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
}
