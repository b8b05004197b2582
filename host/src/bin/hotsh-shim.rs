//! `hotsh-shim`: the shim alone (`executor/shim.rs`), a small executable the host starts for
//! every command instead of re-executing its own 20 MB binary.

fn main() {
    hotsh_host::run_shim_if_asked();
    eprintln!("hotsh-shim: started by hotsh for each command; not for direct use");
    std::process::exit(2);
}
