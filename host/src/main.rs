//! The `hotsh` binary; everything lives in the library.

fn main() -> std::process::ExitCode {
    hotsh_host::run_shim_if_asked();
    hotsh_host::main()
}
