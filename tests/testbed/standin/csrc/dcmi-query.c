/*
 * dcmi-query, the stand-in device plugin's window on the chips: it loads
 * libdcmi.so with dlopen from the directories of LD_LIBRARY_PATH, as the
 * MindCluster v7.3.0 device plugin does (Ascend/mind-cluster v7.3.0,
 * component/ascend-common/devmanager/dcmi/dcmi.go l.346), and prints one
 * line per chip: "<logic id> <phy id> <health code> <chip name>". A library that does
 * not load or a failing dcmi_init() is reported on stderr with exit 1.
 */
#include <dlfcn.h>
#include <stdio.h>

#include "dcmi.h"

int main(void)
{
	void *h = dlopen("libdcmi.so", RTLD_NOW | RTLD_GLOBAL);
	int (*init)(void), (*cards)(int *, int *, int), (*num)(int, int *);
	int (*health)(int, int, unsigned int *), (*logic)(int *, int, int);
	int (*chip)(int, int, struct dcmi_chip_info *);
	int list[64], n = 0, ret;

	if (!h) {
		fprintf(stderr, "dlopen libdcmi.so: %s\n", dlerror());
		return 1;
	}
	init = (int (*)(void))dlsym(h, "dcmi_init");
	cards = (int (*)(int *, int *, int))dlsym(h, "dcmi_get_card_num_list");
	num = (int (*)(int, int *))dlsym(h, "dcmi_get_device_num_in_card");
	health = (int (*)(int, int, unsigned int *))dlsym(h, "dcmi_get_device_health");
	logic = (int (*)(int *, int, int))dlsym(h, "dcmi_get_device_logic_id");
	chip = (int (*)(int, int, struct dcmi_chip_info *))dlsym(h, "dcmi_get_device_chip_info");
	if (!init || !cards || !num || !health || !logic || !chip) {
		fprintf(stderr, "libdcmi.so lacks a dcmi function: %s\n", dlerror());
		return 1;
	}
	if ((ret = init()) != 0) {
		fprintf(stderr, "dcmi_init failed, ret is %d\n", ret);
		return 1;
	}
	if ((ret = cards(&n, list, 64)) != 0) {
		fprintf(stderr, "dcmi_get_card_num_list failed, ret is %d\n", ret);
		return 1;
	}
	for (int c = 0; c < n; c++) {
		int k = 0;
		num(list[c], &k);
		for (int d = 0; d < k; d++) {
			int id = -1;
			unsigned int hs = 4;
			struct dcmi_chip_info ci = {0};
			logic(&id, list[c], d);
			health(list[c], d, &hs);
			chip(list[c], d, &ci);
			printf("%d %d %u %s\n", id, id, hs, (char *)ci.chip_name);
		}
	}
	return 0;
}
