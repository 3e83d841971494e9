#!/bin/sh
# npu-stack test bed: stand-in for the Ascend driver package, a
# self-extracting .run (hicann/driver v8.5.0 is packaged with makeself).
# It takes the installer's options and has its file effects
# (docs/host-contract.md section 2, each row citing hicann/driver v8.5.0):
# the driver tree under --install-path, version.info, /etc/ascend_install.info
# edited in place, the kernel modules in /lib/modules/$(uname -r)/updates,
# npu-smi in /usr/local/bin and /usr/local/sbin, /usr/local/dcmi, the loader
# configuration and /lib/davinci.conf. There is no Ascend kernel driver on
# the test bed: when no driver is loaded it "loads" this one the way the
# test bed's nodes model it (a directory per module in /sys/module, the
# device nodes with /dev/null's major and minor).
PKG_VERSION='@VERSION@'
MODULES='@MODULES@'
LOADED='@LOADED@'

install_type='' quiet=n for_all=n install_path=/usr/local/Ascend
user=HwHiAiUser group=HwHiAiUser
for arg in "$@"; do
	case "$arg" in
	--full) install_type=full ;;
	--quiet) quiet=y ;;
	--install-for-all) for_all=y ;;
	--install-path=*) install_path=${arg#--install-path=} ;;
	--install-username=*) user=${arg#--install-username=} ;;
	--install-usergroup=*) group=${arg#--install-usergroup=} ;;
	*) echo "[ERROR] unsupported option $arg (the stand-in package knows --full, --quiet, --install-for-all, --install-path=, --install-username=, --install-usergroup=)"; exit 1 ;;
	esac
done
[ "$quiet" = y ] || echo "Ascend driver $PKG_VERSION (npu-stack test-bed stand-in)"
if [ -z "$install_type" ]; then
	echo "[ERROR] no install type: the stand-in package installs with --full"
	exit 1
fi
# args_parse.sh isRoot.
if [ "$(id -u)" -ne 0 ]; then
	echo "[ERROR] the driver package must be installed by root"
	exit 1
fi
# env_check.sh checkUserAndGroup(): the installer does not create them.
if ! grep -q "^$user:" /etc/passwd; then
	echo "ERR_NO:0x0091;ERR_DES:$user not exists! Please add $user"
	exit 1
fi
if ! grep -q "^$group:" /etc/group; then
	echo "ERR_NO:0x0091;ERR_DES:$group not exists! Please add $group"
	exit 1
fi
case "$install_path" in
/*) ;;
*) echo "[ERROR] --install-path=$install_path is not absolute"; exit 1 ;;
esac

set -e
log=/var/log/ascend_seclog/ascend_install.log
mkdir -p /var/log/ascend_seclog
echo "$(date '+%Y-%m-%d %H:%M:%S') install $PKG_VERSION to $install_path ($*)" >>"$log"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
line=$(awk '/^__PAYLOAD__$/ { print NR + 1; exit 0 }' "$0")
tail -n +"$line" "$0" | tar -xzf - -C "$tmp"

tree="$install_path/driver"
mkdir -p "$tree"
cp -rf "$tmp/driver/." "$tree/"
# run_driver_install.sh l.105-110: version.info 444; driver.xml: libraries 444.
chmod 444 "$tree/version.info" "$tree"/lib64/driver/*.so "$tree"/lib64/common/*.so

# driver_atlas.xml: the headers in driver/include 444 <user>:<group>; npu-smi
# 555 root in both bin directories; /usr/local/dcmi 755 with libdcmi.so and
# the headers.
chown -R "$user:$group" "$tree/include"
chmod 444 "$tree"/include/*.h
for d in /usr/local/bin /usr/local/sbin; do
	mkdir -p "$d"
	cp -f "$tmp/driver/tools/npu-smi" "$d/npu-smi"
	chmod 555 "$d/npu-smi"
done
mkdir -p /usr/local/dcmi
chmod 755 /usr/local/dcmi
cp -f "$tmp/dcmi/libdcmi.so" /usr/local/dcmi/libdcmi.so
for h in dcmi_interface_api.h dsmi_common_interface_custom.h; do
	cp -f "$tmp/driver/include/$h" "/usr/local/dcmi/$h"
	chmod 444 "/usr/local/dcmi/$h"
done

# deal_ko.sh driver_ko_install(): cp -f to /lib/modules/$(uname -r)/updates.
# depmod -a is not run: the stand-in modules are empty files, not ELF objects.
updates="/lib/modules/$(uname -r)/updates"
mkdir -p "$updates"
chmod 755 "$updates"
for m in $MODULES; do
	cp -f "$tmp/driver/host/$m.ko" "$updates/$m.ko"
done

# host_servers_setup.sh so_ldconfig(); run_driver_install.sh pcie_load_path_set().
mkdir -p /etc/ld.so.conf.d
printf '%s\n' "$tree/lib64/common" "$tree/lib64/driver" "$tree/lib64" >/etc/ld.so.conf.d/ascend_driver_so.conf
chmod 440 /etc/ld.so.conf.d/ascend_driver_so.conf
ldconfig
rm -f /lib/davinci.conf
echo "DAVINCI_HOME_PATH=$install_path" >/lib/davinci.conf
chmod 444 /lib/davinci.conf

# common.sh updateInstallParam(): each key rewritten in place.
info=/etc/ascend_install.info
if [ ! -f "$info" ]; then
	touch "$info"
	chmod 644 "$info"
fi
update_param() {
	sed -i "/$1=/d" "$info"
	echo "$1=$2" >>"$info"
}
update_param UserName "$user"
update_param UserGroup "$group"
update_param Driver_Install_Type "$install_type"
update_param Driver_Install_Path_Param "$install_path"
if [ "$for_all" = y ]; then update_param Driver_Install_For_All yes; else update_param Driver_Install_For_All no; fi
update_param Driver_Install_Mode normal

# Load only when no driver is loaded (env_check.sh: drv_pcie_host or
# drv_vpcie); otherwise the new modules load at the next boot, and without
# a hot reset the installer exits 2 (install.sh main(): "2-installation
# successful but hotreset failed"; driver_install.sh
# installationCompletionMessage(): "Reboot needed for installation/upgrade
# to take effect!").
reboot_needed=y
if [ ! -d /sys/module/drv_pcie_host ] && [ ! -d /sys/module/drv_vpcie ]; then
	reboot_needed=n
	for m in $LOADED; do
		mkdir -p "/sys/module/$m"
	done
	chips=0
	if [ -f /var/lib/npu-stack-testbed/chips.json ]; then
		chips=$(grep -o '"health"' /var/lib/npu-stack-testbed/chips.json | wc -l)
		mkdir -p /dev/.npu-stack-testbed
		cp -f /var/lib/npu-stack-testbed/chips.json /dev/.npu-stack-testbed/chips.json
	fi
	# host_sys_init.sh: 660 <user>:<group>, 666 with --install-for-all.
	mode=660
	[ "$for_all" = y ] && mode=666
	i=0
	while [ "$i" -lt "$chips" ]; do
		[ -e "/dev/davinci$i" ] || mknod "/dev/davinci$i" c 1 3
		chown "$user:$group" "/dev/davinci$i"
		chmod "$mode" "/dev/davinci$i"
		i=$((i + 1))
	done
	for d in davinci_manager devmm_svm hisi_hdc; do
		[ -e "/dev/$d" ] || mknod "/dev/$d" c 1 3
		chown "$user:$group" "/dev/$d"
		chmod "$mode" "/dev/$d"
	done
fi

# install.sh statusUpdate().
update_param Driver_Install_Status complete
echo "$(date '+%Y-%m-%d %H:%M:%S') installed $PKG_VERSION" >>"$log"
if [ "$reboot_needed" = y ]; then
	echo "[INFO]Driver package installed successfully! Reboot needed for installation/upgrade to take effect!"
	exit 2
fi
[ "$quiet" = y ] || echo "Driver package installed successfully!"
exit 0
__PAYLOAD__
