// SPDX-License-Identifier: MIT
// CuratorHandover — one side of bench/peers/curator_handover.sh with Apache
// Curator's InterProcessMutex (Debian's libcurator-recipes-java).
//
//   java -cp ... CuratorHandover HOSTS SESSION_MS LOCK_PATH hold IN_FILE END_FILE
//   java -cp ... CuratorHandover HOSTS SESSION_MS LOCK_PATH wait GOT_FILE
//
// hold: acquire, create IN_FILE, wait until a second contender's node is
//   under LOCK_PATH (the waiter is queued), write the wall clock in ns to
//   END_FILE, release. wait: acquire, write the wall clock in ns to
//   GOT_FILE at once, release. (The wall clock: the other side is a shell's
//   date +%s%N.)
// Both first take and release a lock of their own 30 times, so that the
// measured calls do not run cold in a fresh JVM.
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Instant;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorHandover {
    static void stamp(String file) throws Exception {
        Instant t = Instant.now();
        long ns = t.getEpochSecond() * 1_000_000_000L + t.getNano();
        Files.write(Paths.get(file), (ns + "\n").getBytes(StandardCharsets.US_ASCII));
    }

    public static void main(String[] args) throws Exception {
        String hosts = args[0], path = args[2], mode = args[3];
        int sessionMs = Integer.parseInt(args[1]);
        CuratorFramework c = CuratorFrameworkFactory.newClient(hosts, sessionMs, 15000,
                new ExponentialBackoffRetry(100, 3));
        c.start();
        if (!c.blockUntilConnected(15, TimeUnit.SECONDS)) {
            System.err.println("error: no connection to " + hosts);
            System.exit(1);
        }
        // A fresh JVM runs acquire and release cold (interpreted, classes
        // loading): warm them up on a path of their own first, as a
        // long-running service's would be.
        InterProcessMutex warm = new InterProcessMutex(c, path + "-warm-" + mode);
        for (int i = 0; i < 30; i++) {
            warm.acquire();
            warm.release();
        }
        c.getChildren().forPath(path + "-warm-" + mode);
        InterProcessMutex m = new InterProcessMutex(c, path);
        if (!m.acquire(60, TimeUnit.SECONDS)) {
            System.err.println("error: no lock in 60 s");
            System.exit(1);
        }
        if (mode.equals("hold")) {
            Files.write(Paths.get(args[4]), new byte[0]);
            while (c.getChildren().forPath(path).size() < 2)
                Thread.sleep(5);
            stamp(args[5]);
        } else {
            stamp(args[4]);
        }
        m.release();
        c.close();
    }
}
