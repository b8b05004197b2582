//! `hotsh-shim`: the command supervisor alone (`executor/supervisor.rs`), a small executable
//! the host starts once, instead of its own 20 MB binary; it forks every command's shim.

fn main() {
    hotsh_host::run_shim_if_asked();
    eprintln!("hotsh-shim: started by hotsh as its command supervisor; not for direct use");
    std::process::exit(2);
}
