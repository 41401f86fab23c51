# The Linux kernel NVMe/TCP target (nvmet-tcp) in the guest, for nvmf-initiator running
# on the host machine (guest port 4420 is forwarded to the host's 127.0.0.1:14420).
set -x
. /vmout/guest-net.sh
truncate -s 256M /scratch/disk.img
C=/sys/kernel/config/nvmet; S=$C/subsystems/nqn.2014-08.org.example:kernel
mkdir $S; echo 1 > $S/attr_allow_any_host
mkdir $S/namespaces/1; echo /scratch/disk.img > $S/namespaces/1/device_path
echo 1 > $S/namespaces/1/buffered_io; echo 1 > $S/namespaces/1/enable
mkdir $C/ports/1; echo tcp > $C/ports/1/addr_trtype; echo ipv4 > $C/ports/1/addr_adrfam
echo 0.0.0.0 > $C/ports/1/addr_traddr; echo 4420 > $C/ports/1/addr_trsvcid
ln -s $S $C/ports/1/subsystems/
touch /vmout/ready
for i in $(seq 400); do [ -e /vmout/done ] && break; sleep 1; done
dmesg | grep -i nvmet | tail -20
echo KERNEL-TARGET-DONE
