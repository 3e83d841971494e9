/*
 * Stand-in DCMI interface of the test bed: the few functions of the
 * vendor's libdcmi.so that the stand-in npu-smi and device plugin call,
 * with the vendor's names, signatures and error codes
 * (hicann/driver ef377e950a32b1641c108c59481e39e9643b7d63,
 * src/custom/include/dcmi_interface_api.h l.33, l.74-79, l.1972-2041, l.2155, l.3613).
 */
#ifndef NPU_STACK_STANDIN_DCMI_H
#define NPU_STACK_STANDIN_DCMI_H

#define DCMI_OK 0
#define DCMI_ERROR_CODE_BASE (-8000)
#define DCMI_ERR_CODE_INVALID_PARAMETER (DCMI_ERROR_CODE_BASE - 1)
#define DCMI_ERR_CODE_INNER_ERR (DCMI_ERROR_CODE_BASE - 5)
#define DCMI_ERR_CODE_INVALID_DEVICE_ID (DCMI_ERROR_CODE_BASE - 7)
#define DCMI_ERR_CODE_RESOURCE_OCCUPIED (DCMI_ERROR_CODE_BASE - 20)

#define MAX_CHIP_NAME_LEN 32

struct dcmi_chip_info {
	unsigned char chip_type[MAX_CHIP_NAME_LEN];
	unsigned char chip_name[MAX_CHIP_NAME_LEN];
	unsigned char chip_ver[MAX_CHIP_NAME_LEN];
	unsigned int aicore_cnt;
};

int dcmi_init(void);
int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *chip_info);
int dcmi_get_driver_version(char *driver_ver, unsigned int len);
int dcmi_get_card_num_list(int *card_num, int *card_list, int list_len);
int dcmi_get_device_num_in_card(int card_id, int *device_num);
int dcmi_get_device_health(int card_id, int device_id, unsigned int *health);
int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id);

/*
 * Not vendor API: the chip model and name the test bed gave this node
 * ("910B", "A3", "310P"), which the real tool reads from the board.
 */
const char *npu_stack_standin_model(void);
const char *npu_stack_standin_chip_name(void);

#endif
