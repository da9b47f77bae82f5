// CuratorPeer — one worker of bench/peers/peer_bench.py with Apache Curator's
// InterProcessMutex (Debian's libcurator-recipes-java): connect, print
// "ready", read "START_NS END_NS", loop acquire / busy-wait HOLD_US /
// release, print "a b c d" per section (System.nanoTime: CLOCK_MONOTONIC on
// Linux, the clock of every other worker) and "done".
//
//   java -cp ... CuratorPeer HOSTS SESSION_MS LOCK_PATH HOLD_US
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorPeer {
    public static void main(String[] args) throws Exception {
        String hosts = args[0];
        int sessionMs = Integer.parseInt(args[1]);
        String path = args[2];
        long holdNs = Long.parseLong(args[3]) * 1000L;
        CuratorFramework c = CuratorFrameworkFactory.newClient(hosts, sessionMs, 15000,
                new ExponentialBackoffRetry(100, 3));
        c.start();
        if (!c.blockUntilConnected(15, TimeUnit.SECONDS)) {
            System.err.println("error: no connection to " + hosts);
            System.exit(1);
        }
        InterProcessMutex m = new InterProcessMutex(c, path);
        PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false);
        out.println("ready");
        out.flush();
        String[] se = new BufferedReader(new InputStreamReader(System.in)).readLine().trim().split(" ");
        long start = Long.parseLong(se[0]), end = Long.parseLong(se[1]);
        long wait = start - System.nanoTime() - 500000;
        if (wait > 0)
            Thread.sleep(wait / 1000000, (int) (wait % 1000000));
        while (System.nanoTime() < start)
            Thread.onSpinWait();
        // Kept in memory until the end: printing during the run would time it.
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
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < n; i += 4)
            sb.append(r[i]).append(' ').append(r[i + 1]).append(' ').append(r[i + 2]).append(' ')
                    .append(r[i + 3]).append('\n');
        sb.append("done\n");
        out.print(sb);
        out.flush();
        c.close();
        System.exit(0);
    }
}
