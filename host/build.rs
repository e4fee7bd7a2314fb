//! Records the cargo profile the `host` binary is built with, which
//! `host bench` prints beside its figures: `release` builds fast and
//! `dist` adds thin LTO (the workspace's `Cargo.toml`), and the two measure
//! differently. Cargo gives a build script the profile's name only through
//! its output directory: `<target>/<profile dir>/build/<package>-<hash>/out`
//! (`<target>/<triple>/<profile dir>/…` when cross-compiling), where the
//! profile `dev`'s directory is `debug`.

use std::path::Path;

fn main() {
    let out_dir = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let profile = match Path::new(&out_dir)
        .ancestors()
        .nth(3)
        .and_then(Path::file_name)
        .and_then(|name| name.to_str())
    {
        Some("debug") => "dev",
        Some(name) => name,
        None => "unknown",
    };
    println!("cargo:rustc-env=SKILLHOST_BUILD_PROFILE={profile}");
    println!("cargo:rerun-if-changed=build.rs");
}
