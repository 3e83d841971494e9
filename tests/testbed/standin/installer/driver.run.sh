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
#
# Over an installed package it takes upstream's overwrite path: it refuses
# while processes hold the chips' device nodes of a loaded driver (unless
# --force), then removes the old package (version.info first) before
# installing. The test bed can pause it between the two (pause_point).
PKG_VERSION='@VERSION@'
MODULES='@MODULES@'
LOADED='@LOADED@'

install_type='' quiet=n for_all=n force=n install_path=/usr/local/Ascend
user=HwHiAiUser group=HwHiAiUser
for arg in "$@"; do
	case "$arg" in
	--full) install_type=full ;;
	--quiet) quiet=y ;;
	--install-for-all) for_all=y ;;
	# args_parse.sh l.324 (force=n), l.426-430 (--force sets force=y).
	--force) force=y ;;
	--install-path=*) install_path=${arg#--install-path=} ;;
	--install-username=*) user=${arg#--install-username=} ;;
	--install-usergroup=*) group=${arg#--install-usergroup=} ;;
	*) echo "[ERROR] unsupported option $arg (the stand-in package knows --full, --quiet, --force, --install-for-all, --install-path=, --install-username=, --install-usergroup=)"; exit 1 ;;
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
logFile=/var/log/ascend_seclog/ascend_install.log
mkdir -p /var/log/ascend_seclog
echo "$(date '+%Y-%m-%d %H:%M:%S') install $PKG_VERSION to $install_path ($*)" >>"$logFile"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
line=$(awk '/^__PAYLOAD__$/ { print NR + 1; exit 0 }' "$0")
tail -n +"$line" "$0" | tar -xzf - -C "$tmp"

# log_common.sh log() l.13-17.
log() {
	echo "[Driver] [$(date '+%Y-%m-%d %H:%M:%S')] [$(id | awk '{printf $1}')] $1" >>"$logFile"
}
info=/etc/ascend_install.info
updates="/lib/modules/$(uname -r)/updates"

# env_check.sh check_pkg_firmware_version() (l.261-286) over a loaded
# driver (drv_pcie_host or drv_vpcie loaded: first_time=n): the firmware's
# version.info under the recorded install path, whose Version= line's
# second dot-separated field is 11, refuses every install
# (check_firmware_version_byfile() l.237-242, please_change_RC1driver_package()
# l.244-248, printed by drvEcho and ended by exitLog 1, log_common.sh
# l.19-29). Upstream looks only when 910B chips (PCI 19e5:d802) are present;
# the test bed's nodes have no PCI devices, so the stand-in looks for every
# model. A first install reads the chips' PCI BAR instead
# (check_firmware_version_bybar(), lspci): not modelled.
check_firmware() {
	[ -d /sys/module/drv_pcie_host ] || [ -d /sys/module/drv_vpcie ] || return 0
	[ -f "$info" ] || return 0
	fw_path=$(grep "Driver_Install_Path_Param=" "$info" | cut -d= -f2- || true)
	[ -n "$fw_path" ] && [ -e "$fw_path/firmware/version.info" ] || return 0
	fw=$(grep ^Version= "$fw_path/firmware/version.info" | awk -F. '{print $2}')
	[ "${fw}"x = "11"x ] || return 0
	now=$(date '+%Y-%m-%d %H:%M:%S')
	echo "[Driver] [$now] [WARNING]Download and install the 23.0.RC1 driver package. Then upgrade to the target version. "
	log "[WARNING]Download and install the 23.0.RC1 driver package. Then upgrade to the target version."
	printf '[Driver] [%s] [INFO]End time: %s\n' "$now" "$now" | tee -a "$logFile"
	exit 1
}
check_firmware

# check_holders is check_boot_status() (driver_install.sh l.377-414) as it
# goes on a loaded driver: without --force, the installer sets the chips'
# hot-reset flag, which fails while processes hold the device nodes
# (common.sh setHotResetFlag() l.380-408), and then refuses through
# exitInstallInfo() (driver_install.sh l.416-422). Upstream asks the old
# tree's tools/upgrade-tool (absent from the stand-in package) whether the
# chips are booted; here they are when the driver is loaded. The holders
# are found as common.sh checkUserProcess() does when fuser is missing
# (l.222-233: `ls -l /proc/*/fd` matched against the device paths; the
# stand-in never uses fuser) and logged with their command lines
# (upstream: `ps -ef | grep -w <pid>`, l.217, l.230). Only paths can tell
# the test bed's device nodes apart: all are 1:3, as /dev/null is.
# Upstream's loops `for f_file in $davinci_files` (l.210, l.223) read only
# the array's first element (/dev/davinci_manager), so its log names fewer
# holders than the driver refuses for; the stand-in names them all.
# checkUserDocker() (docker inspect) is not modelled: the test bed's nodes
# run containerd.
check_holders() {
	if [ ! -d /proc/self/fd ]; then
		# The real driver knows its holders without /proc; the stand-in
		# does not, and would wrongly let the install through.
		echo "[ERROR] npu-stack test-bed stand-in: /proc is not mounted in the installer's root, so it cannot see which processes hold the davinci nodes"
		exit 1
	fi
	holders=$(ls -l /proc/[0-9]*/fd 2>/dev/null | awk '
		/^\/proc\/[0-9]+\/fd:$/ { pid = substr($0, 7, length($0) - 10); next }
		/ -> / {
			t = $0; sub(/^.* -> /, "", t); sub(/ \(deleted\)$/, "", t)
			if (t ~ /^\/dev\/(davinci_manager|devmm_svm|hisi_hdc|davinci[0-9]+)$/) print pid, t
		}')
	[ -n "$holders" ] || return 0
	echo "$holders" | while read -r pid dev; do
		log "[WARNING]$dev has user process: $pid"
		echo "pid $pid holds $dev: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)" >>"$logFile"
	done
	now=$(date '+%Y-%m-%d %H:%M:%S')
	# drvColorEcho() is `echo -e` (log_common.sh l.45-48): the colour
	# codes are part of what upstream prints.
	printf '[Driver] [%s] [ERROR]\033[31mThe davinci nodes are occupied by some processes, please stop processes and install or uninstall again, details in : %s \033[0m\n' "$now" "$logFile"
	log "[ERROR]The davinci nodes are occupied by some processes, please stop processes and install or uninstall again."
	printf '[Driver] [%s] [INFO]If you want to install or uninstall the driver forcibly, add the force parameter. For details, see [--help].\n' "$now"
	# exitLog() (log_common.sh l.24-29).
	printf '[Driver] [%s] [INFO]End time: %s\n' "$now" "$now" | tee -a "$logFile"
	exit 1
}

# uninstall_old is uninstallRun() (driver_install.sh l.529-640) for the
# package installed at $1: the check above before anything is removed,
# version.info first (l.575-580), then host_servers_remove.sh
# remove_so_conf() (l.71-77) and run_driver_uninstall.sh --uninstall: the
# Driver_Install_Status line (l.441), the modules the package put in
# updates (filelist_remove() l.249-275; the stand-in takes their names
# from the old tree's host/*.ko), the package's files (drv_ddr_remove()
# l.154-247, the files listed in its filelist.csv, which include npu-smi
# and /usr/local/dcmi from driver_atlas.xml), /lib/davinci.conf
# (pcie_load_path_unset() l.302-311). The install directory itself stays
# (delTargetdir() l.340-343 removes only an empty /usr/local/Ascend left
# behind for another path).
uninstall_old() {
	old="$1/driver"
	if [ "$force" = n ] && { [ -d /sys/module/drv_pcie_host ] || [ -d /sys/module/drv_vpcie ]; }; then
		check_holders
	fi
	rm -f "$old/version.info"
	log "[INFO]rm -rf version.info success"
	if [ -f /etc/ld.so.conf.d/ascend_driver_so.conf ]; then
		rm -f /etc/ld.so.conf.d/ascend_driver_so.conf
		ldconfig
	fi
	sed -i '/Driver_Install_Status=/d' "$info"
	for ko in "$old"/host/*.ko; do
		if [ -e "$ko" ]; then rm -f "$updates/${ko##*/}"; fi
	done
	if [ -d "$old" ]; then
		find "$old" -mindepth 1 -delete
	fi
	rm -f /usr/local/bin/npu-smi /usr/local/sbin/npu-smi /usr/local/dcmi/libdcmi.so \
		/usr/local/dcmi/dcmi_interface_api.h /usr/local/dcmi/dsmi_common_interface_custom.h /lib/davinci.conf
	log "[INFO]uninstall driver success"
}

# pause_point lets the test bed stop the installer where a real one can
# be killed half-way: the old package is gone (no version.info, no
# Driver_Install_Status=complete) and the new one not yet copied. With the
# FIFOs reached and release in $pause (standin.NewInstallerPause), the
# installer writes its PID (in its PID namespace) to reached, then waits
# for a line on release; end of file (the test bed went away) releases it
# too. Nothing here polls.
pause=/var/lib/npu-stack-testbed/installer-pause
pause_point() {
	if [ -p "$pause/reached" ] && [ -p "$pause/release" ]; then
		echo $$ >"$pause/reached"
		read -r _ <"$pause/release" || true
	fi
}

# Script entry (driver_install.sh l.647-650, l.678-706): the package is
# installed when /etc/ascend_install.info names an install path
# (getInstallParam(), common.sh l.35-58, reads `Key=` with grep and cut);
# then --full takes the overwrite branch, uninstallRun and installRun.
# The old path is the recorded one, not --install-path.
old_path=''
if [ -f "$info" ]; then
	old_path=$(grep "Driver_Install_Path_Param=" "$info" | cut -d= -f2- || true)
fi
if [ -n "$old_path" ]; then
	uninstall_old "$old_path"
fi
pause_point

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
echo "$(date '+%Y-%m-%d %H:%M:%S') installed $PKG_VERSION" >>"$logFile"
if [ "$reboot_needed" = y ]; then
	echo "[INFO]Driver package installed successfully! Reboot needed for installation/upgrade to take effect!"
	exit 2
fi
[ "$quiet" = y ] || echo "Driver package installed successfully!"
exit 0
__PAYLOAD__
