# Renders `npu-smi info` layouts with the printf format strings of
# hicann/driver src/custom/dev_prod/user/npucli/src/npu_info_print.c
# (commit ef377e950a32b1641c108c59481e39e9643b7d63). Python's % operator
# implements the same conversions (%-Nd, %-Ns, %-Nu, %-N.1f, %04X, %-2X);
# %lu/%llu are written %d. "l.N" below is the line of npu_info_print.c.
#
# Usage: python3 testdata/gen/render.py testdata
import sys

TOOL = "npu-smi"


def chip(health="OK", name="910B3", power=90.0, temp=40, hp=(0, 0), phyid=0, bdf=(0, 0xC1, 0, 0),
         usage=0, mem=(0, 0), hbm=(3390, 65536), logic=0, utiliza_na=False, procs=()):
    """One chip as npu_info.c query_card_chip_total_info() leaves it.

    health None: a health value npu_common_get_health_state_str() cannot
    name (the driver's 0xffffffff, DCMI_DEVICE_NOT_EXIST), so the NPU row
    is not printed. name "": dcmi_get_device_chip_info() failed and the
    zeroed chip_name prints empty. logic None: dcmi_get_device_logic_id()
    failed, so the plain layout's chip row is not printed. procs: (pid,
    process name, MB) of processes on the chip.
    """
    return dict(health=health, name=name, power=power, temp=temp, hp=hp, phyid=phyid, bdf=bdf, usage=usage,
                mem=mem, hbm=hbm, logic=logic, utiliza_na=utiliza_na, procs=list(procs))


def card(card_id, chips, phyid_fails_at=None, pcie=True):
    """phyid_fails_at: chip index whose dcmi_get_phyid_by_cardid_and_devid()
    fails (HBM layout, not NPU_SMI_V2), which ends the card's output there.
    pcie False: the PCIe query failed (is_has_pcie, plain layout)."""
    return dict(id=card_id, chips=chips, phyid_fails_at=phyid_fails_at, pcie=pcie)


def hbm(version, cards, chip_type, v2=False, ub=False, warning=False, tool_version=None):
    """print_total_info_with_HBM (l.611): chip types 910, 910B, 910_93, 950.

    v2: the NPU_SMI_V2 build (CMakeLists.txt: PRODUCT ascend950).
    ub: an A900 A5 UB mainboard (dcmi_mainboard_is_a900_a5_ub), no PCIe.
    """
    tool_version = tool_version or version
    o = []
    if chip_type == "950":  # print_total_info_header_950, l.584
        o.append("+-------------------------------------------------------------------------------------------------+\n")
        o.append("| %s %-40s Version: %-37s |\n" % (TOOL, tool_version, version))
        o.append("+--------+------------------+---------------+-----------------------------------------------------+\n")
        o.append("| NPU ID | Name             | Health        | Power(W)    Temp(C)           Hugepages-Usage(page) |\n")
        o.append("|        |                  | Bus-Id        | NPU Util(%) Memory-Usage(MB)  HBM-Usage(MB)         |\n")
        o.append("+========+==================+===============+=====================================================+\n")
    else:  # print_total_info_header_v1, l.594
        o.append("+-------------------------------------------------------------------------------------------------+\n")
        o.append("| %s %-24s Version: %-53s |\n" % (TOOL, tool_version, version))
        o.append("+---------------------------+---------------+-----------------------------------------------------+\n")
        o.append("| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page) |\n")
        if chip_type == "910_93":
            o.append("| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)   "
                     "      |\n")
        else:
            o.append("| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)  "
                     "       |\n")
        o.append("+===========================+===============+=====================================================+\n")
    for cd in cards:  # print_card_total_info_with_HBM, l.484
        n = len(cd["chips"])
        stopped = False
        for ci, c in enumerate(cd["chips"]):
            if not v2 and cd["phyid_fails_at"] == ci:  # l.494-498: return, no card border
                stopped = True
                break
            if c["health"] is not None:  # print_card_total_info_with_HBM_first, l.405
                hp = (c["hp"][0], c["hp"][1])
                if ci == 1 and chip_type == "910_93":  # l.416: die 1 prints no power
                    o.append("| %-5d %-20s| %-13s | %-11s %-17d %-6d/ %-13d |\n"
                             % (cd["id"], c["name"], c["health"], "-", c["temp"], hp[0], hp[1]))
                elif v2:  # l.428
                    o.append("| %-7d| %-17s| %-13s | %-11.1f %-17d %-6d/ %-13d |\n"
                             % (cd["id"], c["name"], c["health"], c["power"], c["temp"], hp[0], hp[1]))
                else:  # l.438
                    o.append("| %-5d %-20s| %-13s | %-11.1f %-17d %-6d/ %-13d |\n"
                             % (cd["id"], c["name"], c["health"], c["power"], c["temp"], hp[0], hp[1]))
            # print_card_total_info_with_HBM_second, l.451
            mem = c["mem"] if chip_type == "910" else (0, 0)  # l.456-459
            if chip_type == "910_93":  # print_chip_info, l.393
                o.append("| %-5d %-20u| " % (ci, c["phyid"]))
            elif chip_type == "950":
                o.append("|%-8s|%-18s| " % ("", ""))
            else:
                o.append("| %-26d| " % ci)
            if ub:  # l.469-472
                o.append("%-11s   | %-11u %-5d/ %-10d %-6d/ %-13d |\n"
                         % ("NA", c["usage"], mem[0], mem[1], c["hbm"][0], c["hbm"][1]))
            else:  # l.474
                b = c["bdf"]
                o.append("%04X:%02X:%02X.%-2X | %-11u %-5d/ %-10d %-6d/ %-13d |\n"
                         % (b[0], b[1], b[2], b[3], c["usage"], mem[0], mem[1], c["hbm"][0], c["hbm"][1]))
            if ci != n - 1:  # l.502-505
                o.append("+------------------------------------------------------"
                         "-------------------------------------------+\n")
        if n > 0 and not stopped:  # l.508-516
            if v2:
                o.append("+========+==================+===============+=========================="
                         "===========================+\n")
            else:
                o.append("+===========================+===============+=========================="
                         "===========================+\n")
    o.append("+---------------------------+---------------+-----------------------------------------------------+\n")
    if v2:  # l.626-634
        o.append("| NPU ID                    | Process id    | Process name             | Process memory(MB)       |\n")
    else:
        o.append("| NPU     Chip              | Process id    | Process name             | Process memory(MB)       |\n")
    o.append("+===========================+===============+=====================================================+\n")
    for cd in cards:  # print_proc_total_info_with_HBM, l.521
        found = 0
        for ci, c in enumerate(cd["chips"]):
            for pid, pname, pmem in c["procs"]:
                found += 1
                if v2:  # l.535
                    o.append("| %-26d | %-13d | %-24s | %-23d |\n" % (cd["id"], pid, pname, pmem))
                else:  # l.541
                    o.append("| %-7d %-18d| %-13d | %-24s | %-24d |\n" % (cd["id"], ci, pid, pname, pmem))
        if not found:  # l.553-556
            o.append("| No running processes found in NPU %-7d                      "
                     "                                 |\n" % cd["id"])
        o.append("+===========================+======="
                 "========+=====================================================+\n")
    if warning:  # l.641-644
        o.append("[WARNING]The driver package may not be completely installed, "
                 "which may cause function abnormal. Please reinstall it.\n")
    return "".join(o)


def plain(version, cards, chip_type, board="card", windows=False, tool_version=None):
    """print_total_info (l.351): every other chip type (310, 310P, 310B).

    board: npu_board_type_is_*; the process table is printed for 310 and
    310P on card, station, hilens, server and model boards (l.354, l.378).
    windows: the _WIN32 build (l.239-243, l.359-360).
    """
    tool_version = tool_version or version
    o = []
    o.append("+------------------------------------------------------------------------"
             "--------------------------------+\n")
    o.append("| %s %-40s Version: %-44s |\n" % (TOOL, tool_version, tool_version if windows else version))
    o.append("+-------------------------------+-----------------+-----------------------"
             "-------------------------------+\n")
    o.append("| NPU     Name                  | Health          | Power(W)     Temp(C)  "
             "         Hugepages-Usage(page) |\n")
    o.append("| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)"
             "                        |\n")
    o.append("+===============================+=================+======================="
             "===============================+\n")
    for cd in cards:  # print_card_total_info, l.333
        n = len(cd["chips"])
        for ci, c in enumerate(cd["chips"]):
            if c["health"] is not None:  # print_card_total_info_first, l.230
                if windows:  # l.240
                    o.append("| %-7d %-22s| %-15s | %-12.1f %-17d %-6s/ %-13s |\n"
                             % (cd["id"], c["name"], c["health"], c["power"], c["temp"], "NA", "NA"))
                elif chip_type == "310P":  # l.246
                    o.append("| %-7d %-22s| %-15s | %-12s %-17d %-6d/ %-13d |\n"
                             % (cd["id"], c["name"], c["health"], "NA", c["temp"], c["hp"][0], c["hp"][1]))
                else:  # l.253
                    o.append("| %-7d %-22s| %-15s | %-12.1f %-17d %-6d/ %-13d |\n"
                             % (cd["id"], c["name"], c["health"], c["power"], c["temp"], c["hp"][0], c["hp"][1]))
            if c["logic"] is not None:  # print_card_total_info_second, l.265 (l.272-276: no row)
                if cd["pcie"]:  # l.283
                    b = c["bdf"]
                    o.append("| %-7d %-22d| %04X:%02X:%02X.%-4X | %-12u %-5d/ %-32d |\n"
                             % (ci, c["logic"], b[0], b[1], b[2], b[3], c["usage"], c["mem"][0], c["mem"][1]))
                elif c["utiliza_na"]:  # l.290
                    o.append("| %-7d %-22d| %-15s | %-12u %-3s/ %-34d |\n"
                             % (ci, c["logic"], "NA", c["usage"], "NA", c["mem"][1]))
                else:  # l.293
                    o.append("| %-7d %-22d| %-15s | %-12u %-5d/ %-32d |\n"
                             % (ci, c["logic"], "NA", c["usage"], c["mem"][0], c["mem"][1]))
            if ci != n - 1:  # l.340-343
                o.append("+-------------------------------+-----------------+"
                         "------------------------------------------------------+\n")
        o.append("+===============================+======="  # l.346
                 "==========+======================================================+\n")
    if chip_type in ("310", "310P") and board in ("card", "station", "hilens", "server", "model"):  # l.378
        o.append("+-------------------------------+-----------------+-----------------------"
                 "-------------------------------+\n")
        o.append("| NPU     Chip                  | Process id      | Process name          "
                 "   | Process memory(MB)        |\n")
        o.append("+===============================+=================+======================="
                 "===============================+\n")
        for cd in cards:  # print_proc_total_info, l.300
            found = 0
            for ci, c in enumerate(cd["chips"]):
                for pid, pname, pmem in c["procs"]:
                    found += 1
                    o.append("| %-7d %-22d| %-15d | %-24s | %-25d |\n" % (cd["id"], ci, pid, pname, pmem))
            if not found:  # l.324-327
                o.append("| No running processes found in NPU %-7d                 "
                         "                                             |\n" % cd["id"])
            o.append("+===============================+======="
                     "==========+======================================================+\n")
    return "".join(o)


out = sys.argv[1]


def w(name, s):
    with open(out + "/" + name, "w") as f:
        f.write(s)


def c910b(health, power, temp, bus, usage, hbm_used, hbm_total, name="910B3", procs=()):
    return chip(health=health, name=name, power=power, temp=temp, bdf=(0, bus, 0, 0), usage=usage,
                hbm=(hbm_used, hbm_total), procs=procs)


# 910B: one chip per card (Atlas 800T A2, 8 cards).
bdfs = [0xC1, 0xC2, 0x81, 0x82, 0x01, 0x02, 0x41, 0x42]
w("910b-8chips-ok.txt", hbm("24.1.rc2",
  [card(i, [c910b("OK", 94.7 - i * 0.3, 37 + i % 3, bdfs[i], 0, 3390, 65536)]) for i in range(8)], "910B"))
w("910b-warning-critical.txt", hbm("23.0.6", [
    card(0, [c910b("OK", 176.3, 45, 0xC1, 38, 29012, 32768, "910B4", [(2150317, "python3.10", 28893)])]),
    card(1, [c910b("Warning", 181.0, 71, 0x01, 41, 28840, 32768, "910B4", [(2150318, "python3.10", 28721)])]),
    card(2, [c910b("Critical", 0.0, 0, 0xC2, 0, 0, 32768, "910B4")]),
    card(3, [c910b("Alarm", 169.9, 44, 0x02, 36, 28811, 32768, "910B4", [(2150320, "python3.10", 28692)])])],
    "910B", warning=True))
# 910B, card 3's health is one npu-smi cannot name (0xffffffff: the device
# is gone), so its NPU row is missing; card 5's chip info query failed, so
# its name is empty.
lost = []
for i in range(8):
    c = c910b("OK", 92.5, 38, bdfs[i], 0, 3390, 65536)
    if i == 3:
        c["health"] = None
    if i == 5:
        c["name"] = ""
    lost.append(card(i, [c]))
w("910b-lost-health-empty-name.txt", hbm("24.1.rc2", lost, "910B"))
# Ascend 910 (Atlas 800 9000): the 910B layout, but Memory-Usage is the
# chip's (l.456-459 zero it only for 910B, 910_93 and 950).
w("910-procs.txt", hbm("22.0.4", [
    card(i, [chip(name="910ProB", power=71.2 + i, temp=41, bdf=(0, [0x3D, 0x3E, 0xB1, 0xB2][i], 0, 0), usage=52 * (i % 2),
                  mem=(2612, 15665), hbm=(14101 * (i % 2) + 2, 32768),
                  procs=[(40117 + i, "python3.7", 13926)] if i % 2 else [])]) for i in range(4)], "910"))
# A3 (910_93): two chips (dies) per card, Phy-ID per chip, die 1 has no power reading.
a3cards = []
for cid in range(8):
    dies = []
    for die in range(2):
        dies.append(chip(health="Critical" if (cid == 5 and die == 1) else "OK", name="Ascend910", power=172.4 - cid,
                         temp=38 + die, phyid=cid * 2 + die, bdf=(0, 0x9D + cid * 2 + die, 0, 0), hbm=(3399, 65536)))
    a3cards.append(card(cid, dies))
w("a3-16chips-one-critical.txt", hbm("25.0.rc1", a3cards, "910_93"))
# A3, card 2 die 1: dcmi_get_phyid_by_cardid_and_devid() fails, so the
# card's output stops after die 0's separator, without its card border.
a3short = []
for cid in range(4):
    dies = [chip(name="Ascend910", power=168.0, temp=37, phyid=cid * 2 + die, bdf=(0, 0x9D + cid * 2 + die, 0, 0),
                 hbm=(3399, 65536)) for die in range(2)]
    a3short.append(card(cid, dies, phyid_fails_at=1 if cid == 2 else None))
w("a3-phyid-failed.txt", hbm("25.0.rc1", a3short, "910_93"))
# 950, NPU_SMI_V2 build (PRODUCT ascend950): one device per NPU ID, no
# chip index, name in its own column.
w("950-v2.txt", hbm("26.0.0", [
    card(i, [chip(health=["OK", "OK", "Warning", "OK"][i], name="Ascend950PR", power=310.5 - i, temp=44 + i,
                  bdf=(0, [0x06, 0x07, 0x86, 0x87][i], 0, 0), usage=3 * i, hbm=(5120 + i, 131072),
                  procs=[(81922, "python3.11", 98304)] if i == 1 else [])]) for i in range(4)], "950", v2=True))
# 950, NPU_SMI_V2 build on an A900 A5 UB mainboard: Bus-Id NA (l.469-472).
w("950-v2-ub.txt", hbm("26.0.0", [
    card(i, [chip(health="OK" if i != 1 else "Alarm", name="Ascend950DT", power=402.0, temp=50, usage=0,
                  hbm=(6144, 147456))]) for i in range(2)], "950", v2=True, ub=True))
# 950 in the build without NPU_SMI_V2: the 950 header (l.616-617) over the
# older NPU row (l.438) and the 950 chip row (l.400-401).
w("950-legacy-build.txt", hbm("26.0.0", [
    card(i, [chip(name="Ascend950PR", power=305.0, temp=45, bdf=(0, [0x06, 0x07][i], 0, 0), hbm=(5120, 131072))])
    for i in range(2)], "950", warning=True))
# 310P Atlas 300I Pro: one chip per card.
w("310p-pro-4chips.txt", plain("24.1.0", [
    card(i, [chip(name="310P3", temp=46 + i % 2, hp=(0, 0), logic=i, bdf=(0, [0x3B, 0x3C, 0x86, 0x87][i], 0, 0),
                  mem=(1412, 21527), procs=[(88412, "mindie_llm_back", 1024)] if i == 0 else [])])
    for i in range(4)], "310P"))
# 310P Atlas 300I Duo: two chips per card, each with its own NPU row.
duo = []
for k, (cid, health, bus) in enumerate([(1, "OK", 0x01), (2, "Warning", 0x11), (4, "Critical", 0x81)]):
    duo.append(card(cid, [
        chip(health=health, name="310P3", temp=52, logic=2 * k, bdf=(0, bus, 0, 0), mem=(1701, 44280)),
        chip(health=health if cid != 2 else "OK", name="310P3", temp=53, logic=2 * k + 1, bdf=(0, bus + 1, 0, 0),
             mem=(1483, 43693))]))
w("310p-duo.txt", plain("23.0.0", duo, "310P", board="server"))
# 310P Duo with faults: card 1 chip 1's logic ID lookup failed (NPU row, no
# chip row); card 2 chip 0's health is unnameable (chip row, no NPU row);
# card 3 chip 1's chip info query failed (empty name).
faults = []
for k, cid in enumerate([1, 2, 3]):
    c0 = chip(name="310P3", temp=50, logic=2 * k, bdf=(0, 0x01 + 0x10 * k, 0, 0), mem=(1701, 44280))
    c1 = chip(name="310P3", temp=51, logic=2 * k + 1, bdf=(0, 0x02 + 0x10 * k, 0, 0), mem=(1483, 43693))
    if cid == 1:
        c1["logic"] = None
    if cid == 2:
        c0["health"] = None
    if cid == 3:
        c1["name"] = ""
    faults.append(card(cid, [c0, c1]))
w("310p-duo-faults.txt", plain("24.1.0", faults, "310P", board="server"))
# 310P on Windows (_WIN32): power printed, Hugepages NA, the tool version
# in both places of the first line.
w("310p-windows.txt", plain("24.1.0", [
    card(0, [chip(name="310P3", power=12.5, temp=47, logic=0, bdf=(0, 0x3B, 0, 0), mem=(1412, 21527))])],
    "310P", windows=True, tool_version="24.1.0"))
# Ascend 310 (Atlas 300I inference card, model 3000): four chips per card.
w("310-4chips.txt", plain("21.0.4", [
    card(cid, [chip(name="310", power=12.8, temp=49 + ci, logic=4 * k + ci, bdf=(0, 0x04 + 0x40 * k + ci, 0, 0),
                    mem=(2703, 8192), procs=[(3301, "AclRuntime", 512)] if (cid == 1 and ci == 2) else [])
               for ci in range(4)]) for k, cid in enumerate([0, 1])], "310"))
# 310 on a SOC board (Atlas 200): no process table (board soc), no PCIe and
# no memory reading: Bus-Id NA, Memory-Usage "NA / <total>" (l.289-291).
w("310-soc-na.txt", plain("21.0.4", [
    card(0, [chip(name="310", power=8.0, temp=55, hp=(0, 0), logic=0, mem=(0, 8192), utiliza_na=True)], pcie=False)],
    "310", board="soc"))
# 310B (Atlas 200I A2): the plain layout, power printed, no process table;
# Bus-Id NA when the PCIe query is not supported (SoC without PCIe info).
w("310b-soc.txt", plain("23.0.0", [
    card(0, [chip(name="310B1", power=8.5, temp=52, hp=(15, 15), logic=0, mem=(1523, 3779))], pcie=False)],
    "310B", board="soc"))
