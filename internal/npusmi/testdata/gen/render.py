# Renders npu-smi info layouts with the printf format strings of
# hicann/driver src/custom/dev_prod/user/npucli/src/npu_info_print.c
# (commit ef377e950a32b1641c108c59481e39e9643b7d63). Python's % operator
# implements the same conversions (%-Nd, %-Ns, %-N.1f, %04X, %-2X).
import sys
TOOL = "npu-smi"
def hbm(version, tool_version, cards, a3, procs=None, warning=False):
    o = []
    o.append("+-------------------------------------------------------------------------------------------------+\n")
    o.append("| %s %-24s Version: %-53s |\n" % (TOOL, tool_version, version))
    o.append("+---------------------------+---------------+-----------------------------------------------------+\n")
    o.append("| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page) |\n")
    if a3:
        o.append("| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)   " "      |\n")
    else:
        o.append("| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)  " "       |\n")
    o.append("+===========================+===============+=====================================================+\n")
    for card_id, name, chips in cards:
        for ci, (health, power, temp, phyid, bdf, usage, hbm_used, hbm_total) in enumerate(chips):
            if ci == 1 and a3:
                o.append("| %-5d %-20s| %-13s | %-11s %-17d %-6d/ %-13d |\n" % (card_id, name, health, "-", temp, 0, 0))
            else:
                o.append("| %-5d %-20s| %-13s | %-11.1f %-17d %-6d/ %-13d |\n" % (card_id, name, health, power, temp, 0, 0))
            if a3:
                o.append("| %-5d %-20u| " % (ci, phyid))
            else:
                o.append("| %-26d| " % ci)
            o.append("%04X:%02X:%02X.%-2X | %-11u %-5d/ %-10d %-6d/ %-13d |\n" % (bdf[0], bdf[1], bdf[2], bdf[3], usage, 0, 0, hbm_used, hbm_total))
            if ci != len(chips) - 1:
                o.append("+------------------------------------------------------" "-------------------------------------------+\n")
        o.append("+===========================+===============+==========================" "===========================+\n")
    o.append("+---------------------------+---------------+-----------------------------------------------------+\n")
    o.append("| NPU     Chip              | Process id    | Process name             | Process memory(MB)       |\n")
    o.append("+===========================+===============+=====================================================+\n")
    for card_id, name, chips in cards:
        ps = (procs or {}).get(card_id, [])
        for (chip, pid, pname, mem) in ps:
            o.append("| %-7d %-18d| %-13d | %-24s | %-24d |\n" % (card_id, chip, pid, pname, mem))
        if not ps:
            o.append("| No running processes found in NPU %-7d                      " "                                 |\n" % card_id)
        o.append("+===========================+=======" "========+=====================================================+\n")
    if warning:
        o.append("[WARNING]The driver package may not be completely installed, " "which may cause function abnormal. Please reinstall it.\n")
    return "".join(o)

def plain(version, tool_version, cards, chip310p, procs=None, proc_table=True):
    o = []
    o.append("+------------------------------------------------------------------------" "--------------------------------+\n")
    o.append("| %s %-40s Version: %-44s |\n" % (TOOL, tool_version, version))
    o.append("+-------------------------------+-----------------+-----------------------" "-------------------------------+\n")
    o.append("| NPU     Name                  | Health          | Power(W)     Temp(C)  " "         Hugepages-Usage(page) |\n")
    o.append("| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)" "                        |\n")
    o.append("+===============================+=================+=======================" "===============================+\n")
    for card_id, name, chips in cards:
        for ci, (health, power, temp, hp, logic, bdf, usage, mem_used, mem_total) in enumerate(chips):
            if chip310p:
                o.append("| %-7d %-22s| %-15s | %-12s %-17d %-6d/ %-13d |\n" % (card_id, name, health, "NA", temp, hp[0], hp[1]))
            else:
                o.append("| %-7d %-22s| %-15s | %-12.1f %-17d %-6d/ %-13d |\n" % (card_id, name, health, power, temp, hp[0], hp[1]))
            if bdf is not None:
                o.append("| %-7d %-22d| %04X:%02X:%02X.%-4X | %-12u %-5d/ %-32d |\n" % (ci, logic, bdf[0], bdf[1], bdf[2], bdf[3], usage, mem_used, mem_total))
            else:
                o.append("| %-7d %-22d| %-15s | %-12u %-5d/ %-32d |\n" % (ci, logic, "NA", usage, mem_used, mem_total))
            if ci != len(chips) - 1:
                o.append("+-------------------------------+-----------------+" "------------------------------------------------------+\n")
        o.append("+===============================+=======" "==========+======================================================+\n")
    if proc_table:
        o.append("+-------------------------------+-----------------+-----------------------" "-------------------------------+\n")
        o.append("| NPU     Chip                  | Process id      | Process name          " "   | Process memory(MB)        |\n")
        o.append("+===============================+=================+=======================" "===============================+\n")
        for card_id, name, chips in cards:
            ps = (procs or {}).get(card_id, [])
            for (chip, pid, pname, mem) in ps:
                o.append("| %-7d %-22d| %-15d | %-24s | %-25d |\n" % (card_id, chip, pid, pname, mem))
            if not ps:
                o.append("| No running processes found in NPU %-7d                 " "                                             |\n" % card_id)
            o.append("+===============================+=======" "==========+======================================================+\n")
    return "".join(o)

# Usage: python3 testdata/gen/render.py testdata
out = sys.argv[1]
def w(name, s):
    open(out + "/" + name, "w").write(s)

# 910B: one chip per card (Atlas 800T A2, 8 cards).
bdfs = [0xC1, 0xC2, 0x81, 0x82, 0x01, 0x02, 0x41, 0x42]
w("910b-8chips-ok.txt", hbm("24.1.rc2", "24.1.rc2",
  [(i, "910B3", [("OK", 94.7 - i * 0.3, 37 + i % 3, 0, (0, bdfs[i], 0, 0), 0, 3390, 65536)]) for i in range(8)], a3=False))
w("910b-warning-critical.txt", hbm("23.0.6", "23.0.6",
  [(0, "910B4", [("OK", 176.3, 45, 0, (0, 0xC1, 0, 0), 38, 29012, 32768)]),
   (1, "910B4", [("Warning", 181.0, 71, 0, (0, 0x01, 0, 0), 41, 28840, 32768)]),
   (2, "910B4", [("Critical", 0.0, 0, 0, (0, 0xC2, 0, 0), 0, 0, 32768)]),
   (3, "910B4", [("Alarm", 169.9, 44, 0, (0, 0x02, 0, 0), 36, 28811, 32768)])], a3=False,
  procs={0: [(0, 2150317, "python3.10", 28893)], 1: [(0, 2150318, "python3.10", 28721)], 3: [(0, 2150320, "python3.10", 28692)]},
  warning=True))
# A3 (910_93): two chips (dies) per card, Phy-ID per chip, die 1 has no power reading.
a3cards = []
for card in range(8):
    chips = []
    for die in range(2):
        health = "OK"
        if card == 5 and die == 1:
            health = "Critical"
        chips.append((health, 172.4 - card, 38 + die, card * 2 + die, (0, 0x9D + card * 2 + die, 0, 0), 0, 3399, 65536))
    a3cards.append((card, "Ascend910", chips))
w("a3-16chips-one-critical.txt", hbm("25.0.rc1", "25.0.rc1", a3cards, a3=True))
# 310P Atlas 300I Pro: one chip per card.
w("310p-pro-4chips.txt", plain("24.1.0", "24.1.0",
  [(i, "310P3", [("OK", 0, 46 + i % 2, (0, 0), i, (0, [0x3B, 0x3C, 0x86, 0x87][i], 0, 0), 0, 1412, 21527)]) for i in range(4)], chip310p=True,
  procs={0: [(0, 88412, "mindie_llm_back", 1024)]}))
# 310P Atlas 300I Duo: two chips per card, each with its own NPU row.
duo = []
for k, (card, health, bus) in enumerate([(1, "OK", 0x01), (2, "Warning", 0x11), (4, "Critical", 0x81)]):
    duo.append((card, "310P3", [(health, 0, 52, (0, 0), 2 * k, (0, bus, 0, 0), 0, 1701, 44280),
                               (health if card != 2 else "OK", 0, 53, (0, 0), 2 * k + 1, (0, bus + 1, 0, 0), 0, 1483, 43693)]))
w("310p-duo.txt", plain("23.0.0", "23.0.0", duo, chip310p=True))
# 310B (Atlas 200I A2): the plain layout, power printed, no process table;
# Bus-Id NA when the PCIe query is not supported (SoC without PCIe info).
w("310b-soc.txt", plain("23.0.0", "23.0.0",
  [(0, "310B1", [("OK", 8.5, 52, (15, 15), 0, None, 0, 1523, 3779)])], chip310p=False, proc_table=False))
