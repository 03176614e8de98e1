/* spank_vmsched: fold the ranks of every Slurm job step under the node's vmsched CPU manager.
 *
 * plugstack.conf:  required /path/spank_vmsched.so helper=/path/vmslurm-step config=/etc/vmsched/%n.toml
 *   helper  the root helper (vmsched/slurm/step.py) that talks to the CPU manager;
 *   config  the node's vmsched config ("%n" is replaced by the Slurm node name).
 * Users:  srun/sbatch --vm-max-mpl=M   (how far the step may be folded; default: the node's [slurm] max_mpl)
 *
 * Where it acts, all in slurmstepd (remote context, as root):
 *   init_post_opt  admit the step's ranks on this node: the job's uid, slurmstepd itself as the job's
 *                  leader (every task descends from it, nothing else does), the local rank count;
 *                  export the runtime (LD_PRELOAD) and the job's table entry into the step's env;
 *   task_init      (in the first task, before exec) say in the step's output why it is not folded;
 *   exit           release the step (the manager also releases it when slurmstepd exits).
 * In srun (local context) it only passes the allocation's tasks per node on to the step, for steps
 * that start `hydra_pmi_proxy` (mpiexec inside sbatch), whose ranks the proxy starts itself.
 *
 * Why a helper process rather than the protocol in C: the CPU manager's protocol (JSON over ZeroMQ),
 * its configuration (TOML, state directory, socket path, table name) and the runtime library's
 * location and build are defined once, in Python; a C copy would drift from them. The helper runs
 * briefly, as root, with a clean environment and a deadline (a hung CPU manager never hangs a step):
 * on any failure the step runs as plain MPI and says so.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(vmsched, 1);

#define MAX_MPL_LIMIT 1024      /* max MPL, and ranks of a step per node, at most (the manager's MAX_RANKS) */
#define HELPER_TIMEOUT_MS 20000 /* the helper's own requests time out sooner; this is the last resort */
#define OUT_MAX 8192
#define ALLOC_TPN_VAR "VMSCHED_ALLOC_TASKS_PER_NODE"

static int max_mpl;            /* --vm-max-mpl, 0 when not given */
static char helper[PATH_MAX];  /* plugstack argument helper= */
static char config[PATH_MAX];  /* plugstack argument config= (with %n) */
static int admitted;           /* this step is admitted on this node */
static uint32_t job_id, step_id;
static char why_plain[1024];   /* why the step runs as plain MPI (said by its first task) */

static int parse_mpl(const char *s, int *out) {
    char *end = NULL;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || errno || *end || v < 1 || v > MAX_MPL_LIMIT) return -1;
    *out = (int)v;
    return 0;
}

static int opt_max_mpl(int val, const char *optarg, int remote) {
    (void)val;
    if (parse_mpl(optarg, &max_mpl) != 0) {
        slurm_error("vmsched: invalid --vm-max-mpl=%s: expected an integer from 1 to %d", optarg ? optarg : "",
                    MAX_MPL_LIMIT);
        return -1;
    }
    (void)remote;
    return 0;
}

/* Registered in slurm_spank_init (not as a spank_options table, which sbatch and salloc ignore). */
static struct spank_option opt_mpl = {
    "vm-max-mpl", "M", "vmsched: fold the ranks on each node up to M per CPU (default: the node's)", 1, 0, opt_max_mpl};

static int plugin_args(int ac, char **av) {
    for (int i = 0; i < ac; i++) {
        if (!strncmp(av[i], "helper=", 7))
            snprintf(helper, sizeof helper, "%s", av[i] + 7);
        else if (!strncmp(av[i], "config=", 7))
            snprintf(config, sizeof config, "%s", av[i] + 7);
        else {
            slurm_error("vmsched: unknown plugstack argument '%s' (known: helper=PATH config=PATH)", av[i]);
            return -1;
        }
    }
    return 0;
}

/* "2(x3),1" -> the count of node `index`, or -1. */
static int tasks_on_node(const char *tpn, uint32_t index) {
    const char *p = tpn;
    uint32_t seen = 0;
    while (p && *p) {
        char *end;
        long n = strtol(p, &end, 10), rep = 1;
        if (end == p || n < 0) return -1;
        p = end;
        if (!strncmp(p, "(x", 2)) {
            rep = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || rep < 1) return -1;
            p = end + 1;
        }
        if (index < seen + (uint32_t)rep) return (int)n;
        seen += (uint32_t)rep;
        if (*p == ',') p++;
        else if (*p) return -1;
    }
    return -1;
}

/* Run the helper with a clean environment; its stdout goes to `out`. Returns its exit status
 * (-1: it could not be run or did not finish in time, then killed). */
static int run_helper(char *const argv[], char *out, size_t outlen) {
    int fd[2];
    if (pipe2(fd, O_CLOEXEC) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]), close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C.UTF-8", NULL};
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        setsid(); /* out of slurmstepd's process group and session */
        execve(argv[0], argv, envp);
        dprintf(1, "vmsched: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fd[1]);
    size_t n = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        long left = HELPER_TIMEOUT_MS - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        struct pollfd p = {fd[0], POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)left) == 0) {
            kill(pid, SIGKILL);
            snprintf(out, outlen, "vmsched: %s did not answer within %d s", argv[0], HELPER_TIMEOUT_MS / 1000);
            n = strlen(out);
            break;
        }
        ssize_t r = read(fd[0], out + n, outlen - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
        if (n >= outlen - 1) break;
    }
    out[n] = 0;
    close(fd[0]);
    int status = 0;
    pid_t w;
    do {
        w = waitpid(pid, &status, 0);
    } while (w < 0 && errno == EINTR);
    if (w != pid) return -1; /* its status is unknown: do not take it for a success */
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The node's name and its vmsched config path (config= with %n replaced). The name comes from
 * slurmstepd's own environment (slurmd sets SLURMD_NODENAME for itself, multiple-slurmd included),
 * never from the job's: a user must not point the helper at another node's config. */
static void node_config(char *node, size_t nlen, char *buf, size_t len) {
    const char *e = getenv("SLURMD_NODENAME");
    snprintf(node, nlen, "%s", e ? e : "");
    if (!node[0]) gethostname(node, nlen);
    size_t o = 0;
    for (const char *c = config; *c && o + 1 < len; c++) {
        if (c[0] == '%' && c[1] == 'n') {
            o += (size_t)snprintf(buf + o, len - o, "%s", node);
            if (o >= len) o = len - 1;
            c++;
        } else {
            buf[o++] = *c;
        }
    }
    buf[o] = 0;
}

static void unset_job_env(spank_t sp) {
    static const char *vars[] = {"VMSCHED_SHM", "VMSCHED_JOB", "VMSCHED_PER_NODE", NULL};
    for (int i = 0; vars[i]; i++) spank_unsetenv(sp, vars[i]);
}

/* Apply the helper's KEY=VALUE lines to the step's environment (LD_PRELOAD is prepended). */
static void export_env(spank_t sp, char *out) {
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = 0;
        const char *key = line, *val = eq + 1;
        if (!strcmp(key, "LD_PRELOAD")) {
            char old[4096] = "", both[8192];
            if (spank_getenv(sp, key, old, sizeof old) == ESPANK_SUCCESS && old[0]) {
                snprintf(both, sizeof both, "%s:%s", val, old);
                val = both;
            }
            spank_setenv(sp, key, val, 1);
        } else if (!strncmp(key, "OMP_", 4) || !strcmp(key, "OPENBLAS_NUM_THREADS") ||
                   !strcmp(key, "MKL_NUM_THREADS")) {
            spank_setenv(sp, key, val, 0); /* the user's own choice wins */
        } else {
            spank_setenv(sp, key, val, 1);
        }
    }
}

int slurm_spank_init(spank_t sp, int ac, char **av) {
    if (plugin_args(ac, av) != 0) return -1;
    if (spank_option_register(sp, &opt_mpl) != ESPANK_SUCCESS) {
        slurm_error("vmsched: cannot register --vm-max-mpl");
        return -1;
    }
    if (spank_context() == S_CTX_REMOTE && (!helper[0] || !config[0])) {
        slurm_error("vmsched: plugstack.conf must give helper=PATH and config=PATH");
        return -1;
    }
    return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av) {
    (void)ac, (void)av;
    if (spank_context() == S_CTX_LOCAL) {
        /* srun inside an allocation: SLURM_TASKS_PER_NODE is the allocation's (mpiexec places its
         * ranks by it); srun overwrites it for the step, so pass it on under our own name. */
        const char *tpn = getenv("SLURM_TASKS_PER_NODE");
        if (tpn && getenv("SLURM_JOB_ID") && !getenv(ALLOC_TPN_VAR)) setenv(ALLOC_TPN_VAR, tpn, 0);
        return 0;
    }
    if (!spank_remote(sp)) return 0;
    uid_t uid;
    uint32_t ntasks = 0, nodeid = 0;
    if (spank_get_item(sp, S_JOB_ID, &job_id) || spank_get_item(sp, S_JOB_STEPID, &step_id) ||
        spank_get_item(sp, S_JOB_UID, &uid) || spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks) ||
        spank_get_item(sp, S_JOB_NODEID, &nodeid)) {
        slurm_error("vmsched: cannot read the step's identity; not folded");
        return 0;
    }
    if (step_id == SLURM_BATCH_SCRIPT || step_id == SLURM_EXTERN_CONT || step_id == SLURM_INTERACTIVE_STEP)
        return 0; /* the job script, not MPI ranks: its steps are admitted one by one */
    unset_job_env(sp); /* only this plugin says which vmsched job the step is */
    int argc = 0;
    char **argv = NULL;
    int nranks = (int)ntasks;
    if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS && argc > 0) {
        const char *base = strrchr(argv[0], '/');
        base = base ? base + 1 : argv[0];
        if (!strcmp(base, "hydra_pmi_proxy")) {
            /* mpiexec inside sbatch: one proxy per node starts this node's ranks, placed by the
             * allocation's tasks per node. */
            char tpn[1024] = "";
            int n = -1;
            /* From the job's environment: a user may state more ranks than the allocation has, as
             * they may ask Slurm for more tasks with -O; the manager's limits apply either way. */
            if (spank_getenv(sp, ALLOC_TPN_VAR, tpn, sizeof tpn) == ESPANK_SUCCESS) n = tasks_on_node(tpn, nodeid);
            if (n < 1 || n > MAX_MPL_LIMIT) {
                snprintf(why_plain, sizeof why_plain,
                         "vmsched: job %u step %u: cannot tell how many ranks mpiexec starts on this node; "
                         "running as plain MPI", job_id, step_id);
                return 0;
            }
            nranks = n;
        }
    }
    char cfg[PATH_MAX], node[256], s_job[16], s_step[16], s_uid[16], s_n[16], s_mpl[16], s_leader[16];
    node_config(node, sizeof node, cfg, sizeof cfg);
    snprintf(s_job, sizeof s_job, "%u", job_id);
    snprintf(s_step, sizeof s_step, "%u", step_id);
    snprintf(s_uid, sizeof s_uid, "%u", (unsigned)uid);
    snprintf(s_n, sizeof s_n, "%d", nranks);
    snprintf(s_mpl, sizeof s_mpl, "%d", max_mpl);
    snprintf(s_leader, sizeof s_leader, "%d", (int)getpid()); /* slurmstepd: every task descends from it */
    char *cmd[] = {helper, "admit", "--config", cfg, "--node", node, "--job", s_job, "--step", s_step, "--uid", s_uid,
                   "--nranks", s_n, "--max-mpl", s_mpl, "--leader", s_leader, NULL};
    char out[OUT_MAX];
    int rc = run_helper(cmd, out, sizeof out);
    if (rc != 0) {
        char *nl = strchr(out, '\n');
        if (nl && !nl[1]) *nl = 0;
        snprintf(why_plain, sizeof why_plain, "%.1000s", out[0] ? out : "vmsched: the helper failed; running as plain MPI");
        slurm_info("%s", why_plain);
        return 0;
    }
    export_env(sp, out);
    admitted = 1;
    return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av) {
    (void)ac, (void)av;
    int task = -1;
    if (why_plain[0] && spank_get_item(sp, S_TASK_ID, &task) == ESPANK_SUCCESS && task == 0) {
        fprintf(stderr, "%s\n", why_plain);
        fflush(stderr);
    }
    return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av) {
    (void)ac, (void)av;
    if (!spank_remote(sp) || !admitted) return 0;
    char cfg[PATH_MAX], node[256], s_job[16], s_step[16], out[OUT_MAX];
    node_config(node, sizeof node, cfg, sizeof cfg);
    snprintf(s_job, sizeof s_job, "%u", job_id);
    snprintf(s_step, sizeof s_step, "%u", step_id);
    char *cmd[] = {helper, "release", "--config", cfg, "--node", node, "--job", s_job, "--step", s_step, NULL};
    if (run_helper(cmd, out, sizeof out) != 0) slurm_info("vmsched: release: %s", out);
    admitted = 0;
    return 0;
}
