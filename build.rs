//! Compiles `src/alloc_trim.c`, the binary's page trim for mimalloc
//! (src/alloc_tidy.rs), against the headers of the mimalloc that
//! libmimalloc-sys builds and with its defines, so that the page layout the
//! trim reads is the library's own. Linux only (it gives memory back with
//! `madvise`); elsewhere the binary runs without it.

fn main() {
    println!("cargo:rerun-if-changed=src/alloc_trim.c");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DEP_MIMALLOC_INCLUDE_DIR");
    println!("cargo::rustc-check-cfg=cfg(wharf_alloc_trim)");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    // libmimalloc-sys (links = "mimalloc") exports its include directory.
    let Ok(include) = std::env::var("DEP_MIMALLOC_INCLUDE_DIR") else {
        println!("cargo:warning=no mimalloc include directory: the page trim is left out");
        return;
    };
    let mut build = cc::Build::new();
    build
        .file("src/alloc_trim.c")
        .include(&include)
        // As libmimalloc-sys builds the library (no debug features).
        .define("MI_DEBUG", "0")
        .define("MI_NO_THP", "1")
        .flag_if_supported("-ftls-model=initial-exec")
        .flag_if_supported("-Wno-error=date-time")
        .warnings(true);
    if std::env::var("DEBUG").as_deref() != Ok("true") {
        build
            .define("MI_BUILD_RELEASE", None)
            .define("NDEBUG", None);
    }
    build.compile("wharf_alloc_trim");
    println!("cargo:rustc-cfg=wharf_alloc_trim");
}
