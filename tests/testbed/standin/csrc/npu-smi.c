/*
 * Stand-in npu-smi: `npu-smi info` in the vendor's layouts, with the
 * vendor's messages and exit statuses for failures. The printf format
 * strings are those of hicann/driver (commit
 * ef377e950a32b1641c108c59481e39e9643b7d63)
 * src/custom/dev_prod/user/npucli/src/npu_info_print.c, as rendered in
 * internal/npusmi/testdata (README.md there cites each): the HBM layout
 * for 910B and A3 (910_93), the older layout for 310P (npu_info.c
 * query_total_info). Messages and exit statuses: npu_smi.c (main() ends
 * with exit(npu_main(...)), so the status is the code's low byte) and
 * npu_info.c. Numbers other than the health, the chip and card IDs are
 * sample values.
 *
 * It is linked against the same libraries as the vendor's
 * (CMakeLists.txt target_link_libraries(npu-smi ...)), so without them
 * the loader refuses to start it.
 */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "dcmi.h"

#ifndef TOOL_VERSION
#define TOOL_VERSION "0.0.0"
#endif

#define NPU_ERR_CODE_INNER_ERR (-9005)

int npu_stack_standin_c_sec(void);
int npu_stack_standin_mmpa(void);
int npu_stack_standin_drvdsmi_host(void);
int npu_stack_standin_ascend_hal(void);
int npu_stack_standin_dsmi_network(void);

static const char *health_str[] = {"OK", "Warning", "Alarm", "Critical", "UNKNOWN"};

static const char *health_of(int card, int dev)
{
	unsigned int h = 4;
	if (dcmi_get_device_health(card, dev, &h) != DCMI_OK || h > 4)
		h = 4;
	return health_str[h];
}

static int install_complete(void)
{
	char p[4096], line[256];
	const char *root = getenv("NPU_STACK_TESTBED_ROOT");
	FILE *f;
	int done = 0;

	snprintf(p, sizeof(p), "%s/etc/ascend_install.info", root ? root : "");
	f = fopen(p, "r");
	if (!f)
		return 1; /* in a container: upstream prints no warning there */
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "Driver_Install_Status=complete", 30) == 0)
			done = 1;
	fclose(f);
	return done;
}

static void hbm_layout(const char *ver, int a3, int *cards, int ncards)
{
	const char *name = npu_stack_standin_chip_name();
	int logic = 0;

	fputs("+-------------------------------------------------------------------------------------------------+\n", stdout);
	printf("| %s %-24s Version: %-53s |\n", "npu-smi", TOOL_VERSION, ver);
	fputs("+---------------------------+---------------+-----------------------------------------------------+\n", stdout);
	fputs("| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page) |\n", stdout);
	if (a3)
		fputs("| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)         |\n", stdout);
	else
		fputs("| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)         |\n", stdout);
	fputs("+===========================+===============+=====================================================+\n", stdout);
	for (int c = 0; c < ncards; c++) {
		int n = 0;
		dcmi_get_device_num_in_card(cards[c], &n);
		for (int d = 0; d < n; d++) {
			int id = 0;
			dcmi_get_device_logic_id(&id, cards[c], d);
			if (a3 && d == 1)
				printf("| %-5d %-20s| %-13s | %-11s %-17d %-6d/ %-13d |\n", cards[c], name, health_of(cards[c], d), "-", 39, 0, 0);
			else
				printf("| %-5d %-20s| %-13s | %-11.1f %-17d %-6d/ %-13d |\n", cards[c], name, health_of(cards[c], d), 93.6, 40, 0, 0);
			if (a3)
				printf("| %-5d %-20u| ", d, (unsigned)id);
			else
				printf("| %-26d| ", d);
			printf("%04X:%02X:%02X.%-2X | %-11u %-5d/ %-10d %-6d/ %-13d |\n", 0, 0x9D + logic, 0, 0, 0u, 0, 0, 3380, 65536);
			logic++;
			if (d != n - 1)
				fputs("+-------------------------------------------------------------------------------------------------+\n", stdout);
		}
		fputs("+===========================+===============+=====================================================+\n", stdout);
	}
	fputs("+---------------------------+---------------+-----------------------------------------------------+\n", stdout);
	fputs("| NPU     Chip              | Process id    | Process name             | Process memory(MB)       |\n", stdout);
	fputs("+===========================+===============+=====================================================+\n", stdout);
	for (int c = 0; c < ncards; c++) {
		printf("| No running processes found in NPU %-7d                      "
		       "                                 |\n", cards[c]);
		fputs("+===========================+===============+=====================================================+\n", stdout);
	}
	if (!install_complete())
		fputs("[WARNING]The driver package may not be completely installed, which may cause function abnormal. Please reinstall it.\n", stdout);
}

static void plain_layout(const char *ver, int *cards, int ncards)
{
	const char *name = npu_stack_standin_chip_name();

	fputs("+--------------------------------------------------------------------------------------------------------+\n", stdout);
	printf("| %s %-40s Version: %-44s |\n", "npu-smi", TOOL_VERSION, ver);
	fputs("+-------------------------------+-----------------+------------------------------------------------------+\n", stdout);
	fputs("| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |\n", stdout);
	fputs("| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |\n", stdout);
	fputs("+===============================+=================+======================================================+\n", stdout);
	for (int c = 0; c < ncards; c++) {
		int n = 0;
		dcmi_get_device_num_in_card(cards[c], &n);
		for (int d = 0; d < n; d++) {
			int id = 0;
			dcmi_get_device_logic_id(&id, cards[c], d);
			printf("| %-7d %-22s| %-15s | %-12s %-17d %-6lu/ %-13lu |\n", cards[c], name, health_of(cards[c], d), "NA", 45, 0ul, 0ul);
			printf("| %-7d %-22d| %04X:%02X:%02X.%-4X | %-12u %-5d/ %-32d |\n", d, id, 0, 0x01 + id, 0, 0, 0u, 1400, 21527);
			if (d != n - 1)
				fputs("+-------------------------------+-----------------+------------------------------------------------------+\n", stdout);
		}
		fputs("+===============================+=================+======================================================+\n", stdout);
	}
	fputs("+-------------------------------+-----------------+------------------------------------------------------+\n", stdout);
	fputs("| NPU     Chip                  | Process id      | Process name             | Process memory(MB)        |\n", stdout);
	fputs("+===============================+=================+======================================================+\n", stdout);
	for (int c = 0; c < ncards; c++) {
		printf("| No running processes found in NPU %-7d                 "
		       "                                             |\n", cards[c]);
		fputs("+===============================+=================+======================================================+\n", stdout);
	}
}

static int info(void)
{
	char ver[64] = "";
	int cards[64], n = 0, ret;
	const char *model;

	ret = dcmi_get_card_num_list(&n, cards, 64);
	if (ret != DCMI_OK || n <= 0) {
		puts("Failed to get card number.");
		return NPU_ERR_CODE_INNER_ERR;
	}
	if ((ret = dcmi_get_driver_version(ver, sizeof(ver))) != DCMI_OK) {
		puts("Failed to query card total info.");
		return ret;
	}
	model = npu_stack_standin_model();
	if (strcmp(model, "310P") == 0)
		plain_layout(ver, cards, n);
	else
		hbm_layout(ver, strcmp(model, "A3") == 0, cards, n);
	return 0;
}

int main(int argc, char **argv)
{
	int ret;

	/* Touch every linked library, as the vendor's tool uses each. */
	ret = npu_stack_standin_c_sec() | npu_stack_standin_mmpa() | npu_stack_standin_drvdsmi_host() |
	      npu_stack_standin_ascend_hal() | npu_stack_standin_dsmi_network();
	if (ret != 0)
		return 1;
	ret = dcmi_init();
	if (ret == DCMI_ERR_CODE_RESOURCE_OCCUPIED) {
		printf("dcmi model initialized failed, because the device is used. ret is %d\n", ret);
		exit(ret);
	}
	if (ret != DCMI_OK) {
		printf("dcmi module initialize failed. ret is %d\n", ret);
		exit(ret);
	}
	if (argc == 2 && strcmp(argv[1], "info") == 0)
		exit(info());
	puts("Command or option is not found.");
	puts("Usage: npu-smi info");
	exit(NPU_ERR_CODE_INNER_ERR);
}
