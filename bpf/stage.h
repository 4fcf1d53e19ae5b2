/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * stage.h - the stage contract: what a stage of the XDP program returns.
 *
 * The program (xdns.bpf.c) runs its stages in a fixed order on one packet. A stage returns
 * either XDNS_CONTINUE ("not mine to finish: the next stage decides", the frame untouched)
 * or an enum xdns_verdict, which is final: the entry program returns it at once, stats.h
 * counts it and maps it to its XDP action through one table (xdns_actions). A stage never
 * returns a verdict to mean "go on", and XDNS_CONTINUE is no verdict: it has no name, no
 * metric label and no action of its own. Should a bug ever let it reach stats.h, it lands in
 * the counter slot xdns_abi.h reserves for it (XDNS_CONTINUE_SLOT) and the packet is aborted
 * (XDP_ABORTED, seen by the xdp:xdp_exception tracepoint), never sent back to the client.
 *
 * Besides its verdicts, a stage owns a sub-struct of the per-CPU scratch (xdns_abi.h, struct
 * xdns_scratch) and its counters there, and has a written verifier budget (bpf/README.md).
 */
#ifndef XDNS_STAGE_H
#define XDNS_STAGE_H

#include "xdns_abi.h"

#define XDNS_CONTINUE ((enum xdns_verdict)XDNS_CONTINUE_SLOT)

#endif /* XDNS_STAGE_H */
