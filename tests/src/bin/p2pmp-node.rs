//! The node program (`p2pmp_adapters::app`) as a binary of this crate, so the
//! integration tests find it through `CARGO_BIN_EXE_p2pmp-node`.

fn main() -> std::process::ExitCode {
    p2pmp_adapters::app::main()
}
