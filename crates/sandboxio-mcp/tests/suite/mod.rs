mod harness;
mod proxy;
mod server;
mod subscribe;
