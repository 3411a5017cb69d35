/* Finding the bootstrap store through the launcher's own meeting place, so that no port has to be
 * chosen by hand: rank 0 serves the store on a free port and publishes "host:port" there; every
 * other rank looks it up. A store address with a scheme names the meeting place
 * (strata_comm_config_from_env picks it from the launcher's environment):
 *
 *   torch:HOST:PORT   torchrun's agent store (a torch TCPStore, TORCHELASTIC_USE_AGENT_STORE=True),
 *                     as a client of its protocol; the key carries the run id and restart count
 *   pmix:             PMIx (Open MPI's mpirun, srun --mpi=pmix): put, commit, fence, get
 *   pmi:              PMI-1 over PMI_FD (MPICH's Hydra mpiexec): put, barrier, get
 *
 * Both calls are collective over the job for pmi and pmix (their fence or barrier), and return once
 * the address is known. Errors name the meeting place and what failed. */
#ifndef ST_RENDEZVOUS_H
#define ST_RENDEZVOUS_H

#include <stdbool.h>
#include <stddef.h>

#include "strata/status.h"

/* True when `store_addr` names a meeting place rather than host:port. */
bool st_rdzv_scheme(const char *store_addr);

/* Rank 0: publishes `addr` (the store it serves) at the meeting place `how`. */
strata_status_t st_rdzv_publish(const char *how, const char *addr, long long timeout_ms);

/* Any other rank: the store's address from the meeting place `how`, into out. */
strata_status_t st_rdzv_lookup(const char *how, char *out, size_t size, long long timeout_ms);

/* The clients behind the schemes (rendezvous_torch.c, rendezvous_pmi.c, rendezvous_pmix.c): rank 0
 * sets key = value, the others get it (waiting for it). */
strata_status_t st_rdzv_torch(const char *hostport, bool set, const char *key, char *val,
                              size_t size, long long timeout_ms);
strata_status_t st_rdzv_pmi(bool set, const char *key, char *val, size_t size);
strata_status_t st_rdzv_pmix(bool set, const char *key, char *val, size_t size);

#endif
