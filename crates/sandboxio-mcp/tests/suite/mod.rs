mod harness;
mod server;
