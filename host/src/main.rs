fn main() -> std::process::ExitCode {
    dsh_host::cli::main()
}
