use std::process::ExitCode;

fn main() -> ExitCode {
    urmove::cli::main()
}
