/*
 * Stand-in libdcmi.so. The vendor's library asks the kernel driver
 * through /dev/davinci_manager; there is no Ascend kernel driver on the
 * test bed, so this one reads the chips the test bed gave the node from
 * its chips.json (tests/testbed/standin, chips.go) and fails as the
 * vendor's does when the driver is not loaded: dcmi_init() returns
 * DCMI_ERR_CODE_INNER_ERR (-8005) without /dev/davinci_manager.
 *
 * In a workload's container neither copy is there: the container sees
 * only the chips the device plugin gave it (/dev/davinci<N>), as a real
 * one does, and the stand-in reports those, healthy, as chips of the
 * package's model (STANDIN_MODEL, set at build time: the vendor ships one
 * driver package per chip).
 *
 * Every path is read under $NPU_STACK_TESTBED_ROOT (default "/"), so the
 * unit tests can run the built tools against a directory.
 *
 * As the vendor's, a successful dcmi_init() leaves the device nodes open
 * until the process exits (dcmi_init opens /dev/davinci_manager, device
 * handles open /dev/davinci<N>): npu-smi and the device plugin's
 * dcmi-query hold them while they run, and the driver's installer refuses
 * to install over a loaded driver then (installer/driver.run.sh).
 */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dcmi.h"

#ifndef STANDIN_MODEL
#define STANDIN_MODEL "910B"
#endif

#define MAX_CHIPS 64
#define CHIPS_FILE "/var/lib/npu-stack-testbed/chips.json"
/* Inside a container the node's /var is not mounted; the device plugin
 * mounts the host's /dev, where the test bed keeps a copy beside the
 * device nodes (chips.go). */
#define CHIPS_FILE_DEV "/dev/.npu-stack-testbed/chips.json"

struct state {
	int loaded;
	char model[16];
	char name[32];
	int chips_per_card;
	int chips;
	int health[MAX_CHIPS];
	int init_ret;
};

static struct state st;

static void path_of(char *out, size_t n, const char *p)
{
	const char *root = getenv("NPU_STACK_TESTBED_ROOT");
	snprintf(out, n, "%s%s", root ? root : "", p);
}

static char *read_file(const char *p)
{
	char full[4096];
	FILE *f;
	char *buf;
	long len;

	path_of(full, sizeof(full), p);
	f = fopen(full, "r");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, len + 1);
	if (buf && fread(buf, 1, len, f) != (size_t)len) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

/* json_string copies the string value following "key": at or after s. */
static const char *json_string(const char *s, const char *key, char *out, size_t n)
{
	char pat[64];
	const char *p, *e;

	snprintf(pat, sizeof(pat), "\"%s\"", key);
	p = strstr(s, pat);
	if (!p)
		return NULL;
	p = strchr(p + strlen(pat), '"');
	if (!p)
		return NULL;
	e = strchr(p + 1, '"');
	if (!e)
		return NULL;
	snprintf(out, n, "%.*s", (int)(e - p - 1), p + 1);
	return e + 1;
}

static int json_int(const char *s, const char *key, int def)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\"", key);
	p = strstr(s, pat);
	if (!p)
		return def;
	p = strchr(p + strlen(pat), ':');
	return p ? atoi(p + 1) : def;
}

/* visible_chips counts the /dev/davinci<N> nodes. */
static int visible_chips(void)
{
	char dir[4096];
	struct dirent *e;
	DIR *d;
	int n = 0;

	path_of(dir, sizeof(dir), "/dev");
	d = opendir(dir);
	if (!d)
		return 0;
	while ((e = readdir(d)) != NULL) {
		const char *c;
		if (strncmp(e->d_name, "davinci", 7) != 0 || !e->d_name[7])
			continue;
		c = e->d_name + 7;
		while (*c && isdigit((unsigned char)*c))
			c++;
		if (!*c)
			n++;
	}
	closedir(d);
	return n < MAX_CHIPS ? n : MAX_CHIPS;
}

/* hold_nodes opens /dev/davinci_manager and every /dev/davinci<N>; the
 * descriptors stay open until the process exits. Every chip node the
 * process sees is held: npu-smi info and dcmi-query use every chip. */
static void hold_nodes(void)
{
	char dir[4096], p[4096 + 256];
	struct dirent *e;
	DIR *d;

	path_of(p, sizeof(p), "/dev/davinci_manager");
	open(p, O_RDWR | O_CLOEXEC);
	path_of(dir, sizeof(dir), "/dev");
	d = opendir(dir);
	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		const char *c = e->d_name + 7;
		if (strncmp(e->d_name, "davinci", 7) != 0 || !*c)
			continue;
		while (*c && isdigit((unsigned char)*c))
			c++;
		if (*c)
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		open(p, O_RDWR | O_CLOEXEC);
	}
	closedir(d);
}

static int health_code(const char *h)
{
	const char *names[] = {"OK", "Warning", "Alarm", "Critical"};
	for (int i = 0; i < 4; i++)
		if (strcmp(h, names[i]) == 0)
			return i;
	return 4; /* UNKNOWN */
}

int dcmi_init(void)
{
	char dev[4096], h[32];
	char *js;
	const char *p;

	memset(&st, 0, sizeof(st));
	path_of(dev, sizeof(dev), "/dev/davinci_manager");
	if (access(dev, F_OK) != 0)
		return DCMI_ERR_CODE_INNER_ERR;
	js = read_file(CHIPS_FILE);
	if (!js)
		js = read_file(CHIPS_FILE_DEV);
	if (!js) {
		snprintf(st.model, sizeof(st.model), "%s", STANDIN_MODEL);
		st.chips_per_card = strcmp(st.model, "A3") == 0 ? 2 : 1;
		st.chips = visible_chips();
		if (st.chips == 0)
			return DCMI_ERR_CODE_INNER_ERR;
		st.loaded = 1;
		hold_nodes();
		return DCMI_OK;
	}
	json_string(js, "model", st.model, sizeof(st.model));
	json_string(js, "name", st.name, sizeof(st.name));
	st.chips_per_card = json_int(js, "chipsPerCard", strcmp(st.model, "A3") == 0 ? 2 : 1);
	if (st.chips_per_card < 1)
		st.chips_per_card = 1;
	st.init_ret = json_int(js, "dcmiInit", 0);
	p = strstr(js, "\"chips\"");
	while (p && st.chips < MAX_CHIPS && (p = json_string(p, "health", h, sizeof(h))) != NULL)
		st.health[st.chips++] = health_code(h);
	free(js);
	if (st.init_ret != 0)
		return st.init_ret;
	st.loaded = 1;
	hold_nodes();
	return DCMI_OK;
}

int dcmi_get_driver_version(char *driver_ver, unsigned int len)
{
	char conf[4096], vpath[4096] = "/usr/local/Ascend/driver/version.info", line[256];
	char *c, *js;
	FILE *f;

	/* Where the tree is: DCMI reads Driver_Install_Path_Param of
	 * /etc/ascend_install.info and appends /driver/version.info
	 * (hicann/driver main, src/custom/dev_prod/user/dcmi/dcmi_inner/src/
	 * dcmi_inner_info_get.c dcmi_get_install_path, DRV_INSTALL_PATH_INFO
	 * in dcmi_common.h); the installer also records it in
	 * /lib/davinci.conf (run_driver_install.sh pcie_load_path_set), which
	 * a read-only root lacks; a container has the tree at
	 * /usr/local/Ascend/driver. The real call asks the loaded driver;
	 * the stand-in, which has none, reads the tree that was loaded. */
	js = read_file("/etc/ascend_install.info");
	if (js && (c = strstr(js, "Driver_Install_Path_Param=")) != NULL) {
		c += strlen("Driver_Install_Path_Param=");
		c[strcspn(c, "\r\n")] = 0;
		snprintf(vpath, sizeof(vpath), "%s/driver/version.info", c);
	} else {
		free(js);
		js = read_file("/lib/davinci.conf");
		if (js && (c = strstr(js, "DAVINCI_HOME_PATH=")) != NULL) {
			c += strlen("DAVINCI_HOME_PATH=");
			c[strcspn(c, "\r\n")] = 0;
			snprintf(vpath, sizeof(vpath), "%s/driver/version.info", c);
		}
	}
	free(js);
	path_of(conf, sizeof(conf), vpath);
	f = fopen(conf, "r");
	if (!f)
		return DCMI_ERR_CODE_INNER_ERR;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "Version=", 8) == 0) {
			line[strcspn(line, "\r\n")] = 0;
			snprintf(driver_ver, len, "%s", line + 8);
			fclose(f);
			return DCMI_OK;
		}
	}
	fclose(f);
	return DCMI_ERR_CODE_INNER_ERR;
}

int dcmi_get_card_num_list(int *card_num, int *card_list, int list_len)
{
	int n;

	if (!st.loaded)
		return DCMI_ERR_CODE_INNER_ERR;
	n = (st.chips + st.chips_per_card - 1) / st.chips_per_card;
	if (n > list_len)
		return DCMI_ERR_CODE_INVALID_PARAMETER;
	for (int i = 0; i < n; i++)
		card_list[i] = i;
	*card_num = n;
	return DCMI_OK;
}

static int chip_index(int card_id, int device_id)
{
	int i = card_id * st.chips_per_card + device_id;
	if (!st.loaded || card_id < 0 || device_id < 0 || device_id >= st.chips_per_card || i >= st.chips)
		return -1;
	return i;
}

int dcmi_get_device_num_in_card(int card_id, int *device_num)
{
	int n;

	if (!st.loaded || card_id < 0)
		return DCMI_ERR_CODE_INVALID_DEVICE_ID;
	n = st.chips - card_id * st.chips_per_card;
	if (n <= 0)
		return DCMI_ERR_CODE_INVALID_DEVICE_ID;
	*device_num = n < st.chips_per_card ? n : st.chips_per_card;
	return DCMI_OK;
}

int dcmi_get_device_health(int card_id, int device_id, unsigned int *health)
{
	int i = chip_index(card_id, device_id);
	if (i < 0)
		return DCMI_ERR_CODE_INVALID_DEVICE_ID;
	*health = (unsigned int)st.health[i];
	return DCMI_OK;
}

int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id)
{
	int i = chip_index(card_id, device_id);
	if (i < 0)
		return DCMI_ERR_CODE_INVALID_DEVICE_ID;
	*device_logic_id = i;
	return DCMI_OK;
}

int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *chip_info)
{
	if (chip_index(card_id, device_id) < 0)
		return DCMI_ERR_CODE_INVALID_DEVICE_ID;
	memset(chip_info, 0, sizeof(*chip_info));
	snprintf((char *)chip_info->chip_type, MAX_CHIP_NAME_LEN, "Ascend");
	snprintf((char *)chip_info->chip_name, MAX_CHIP_NAME_LEN, "%s", npu_stack_standin_chip_name());
	snprintf((char *)chip_info->chip_ver, MAX_CHIP_NAME_LEN, "V1");
	return DCMI_OK;
}

const char *npu_stack_standin_model(void) { return st.model; }

const char *npu_stack_standin_chip_name(void)
{
	if (st.name[0])
		return st.name;
	if (strcmp(st.model, "A3") == 0)
		return "Ascend910";
	if (strcmp(st.model, "310P") == 0)
		return "310P3";
	return "910B3";
}
