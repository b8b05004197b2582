//! The `hotsh` binary; everything lives in the library.

fn main() -> std::process::ExitCode {
    hotsh_host::main()
}
