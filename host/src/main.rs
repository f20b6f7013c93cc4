fn main() -> std::process::ExitCode {
    if let Some(code) = dsh_host::tools::guard::serve_if_asked() {
        return std::process::ExitCode::from(code);
    }
    dsh_host::cli::main()
}
