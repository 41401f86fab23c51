//! nvmf-initiator: an NVMe-over-Fabrics host.
