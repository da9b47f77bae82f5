// SPDX-License-Identifier: MIT
// CuratorPeer — one worker of bench/peers/peer_bench.py with Apache Curator's
// InterProcessMutex (Debian's libcurator-recipes-java): connect, print
// "ready", read "START_NS END_NS", loop acquire / busy-wait HOLD_US /
// release, print "a b c d" per section (System.nanoTime: CLOCK_MONOTONIC on
// Linux, the clock of every other worker) and "done".
//
//   java -cp ... CuratorPeer HOSTS SESSION_MS LOCK_PATH HOLD_US [THREADS]
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorPeer {
    static long start, end, holdNs;

    /* One client's loop; its sections in r: a b c d per section. */
    static long[] loop(InterProcessMutex m) throws Exception {
        long[] r = new long[1 << 16];
        int n = 0;
        for (;;) {
            long a = System.nanoTime();
            if (a >= end)
                break;
            m.acquire();
            long b = System.nanoTime();
            while (holdNs > 0 && System.nanoTime() < b + holdNs)
                Thread.onSpinWait();
            long cc = System.nanoTime();
            m.release();
            long d = System.nanoTime();
            if (n + 4 > r.length)
                r = java.util.Arrays.copyOf(r, r.length * 2);
            r[n++] = a; r[n++] = b; r[n++] = cc; r[n++] = d;
        }
        return java.util.Arrays.copyOf(r, n);
    }

    public static void main(String[] args) throws Exception {
        String hosts = args[0];
        int sessionMs = Integer.parseInt(args[1]);
        String path = args[2];
        holdNs = Long.parseLong(args[3]) * 1000L;
        // THREADS > 1: that many clients (each its own session) in this one
        // JVM, one thread each; their sections are printed client by client,
        // separated by "next".
        int threads = args.length > 4 ? Integer.parseInt(args[4]) : 1;
        CuratorFramework[] cs = new CuratorFramework[threads];
        InterProcessMutex[] ms = new InterProcessMutex[threads];
        for (int t = 0; t < threads; t++) {
            cs[t] = CuratorFrameworkFactory.newClient(hosts, sessionMs, 15000,
                    new ExponentialBackoffRetry(100, 3));
            cs[t].start();
            if (!cs[t].blockUntilConnected(15, TimeUnit.SECONDS)) {
                System.err.println("error: no connection to " + hosts);
                System.exit(1);
            }
            ms[t] = new InterProcessMutex(cs[t], path);
        }
        PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false);
        out.println("ready");
        out.flush();
        String[] se = new BufferedReader(new InputStreamReader(System.in)).readLine().trim().split(" ");
        start = Long.parseLong(se[0]);
        end = Long.parseLong(se[1]);
        long wait = start - System.nanoTime() - 500000;
        if (wait > 0)
            Thread.sleep(wait / 1000000, (int) (wait % 1000000));
        while (System.nanoTime() < start)
            Thread.onSpinWait();
        // Kept in memory until the end: printing during the run would time it.
        long[][] rs = new long[threads][];
        Thread[] ts = new Thread[threads];
        Exception[] errs = new Exception[threads];
        for (int t = 0; t < threads; t++) {
            final int i = t;
            ts[t] = new Thread(() -> {
                try {
                    rs[i] = loop(ms[i]);
                } catch (Exception e) {
                    errs[i] = e;
                }
            });
            ts[t].start();
        }
        for (int t = 0; t < threads; t++) {
            ts[t].join();
            if (errs[t] != null) {
                System.err.println("error: " + errs[t]);
                System.exit(1);
            }
        }
        StringBuilder sb = new StringBuilder();
        for (int t = 0; t < threads; t++) {
            if (t > 0)
                sb.append("next\n");
            long[] r = rs[t];
            for (int i = 0; i < r.length; i += 4)
                sb.append(r[i]).append(' ').append(r[i + 1]).append(' ').append(r[i + 2]).append(' ')
                        .append(r[i + 3]).append('\n');
        }
        sb.append("done\n");
        out.print(sb);
        out.flush();
        for (CuratorFramework c : cs)
            c.close();
        System.exit(0);
    }
}
