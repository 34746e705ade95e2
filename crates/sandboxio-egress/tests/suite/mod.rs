mod edge;
mod net;
mod proxy;
