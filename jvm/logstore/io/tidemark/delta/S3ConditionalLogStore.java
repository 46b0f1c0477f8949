/*
 * tidemark: a Delta LogStore for S3 whose commits are conditional PUTs.
 *
 * Why: Delta's S3 log store (S3SingleDriverLogStore) checks for an existing commit file and then
 * writes it: two drivers (a paused writer past its lease and its successor) can both write
 * version N, the second silently replacing the first. hadoop-aws 3.4.2 can make a write
 * create-only on the store itself (If-None-Match: *, HADOOP-19256), but only through the
 * createFile() builder with "fs.option.create.conditional.overwrite"; Delta's stores call
 * FileSystem.create(path, overwrite), which stays unconditional even with
 * fs.s3a.performance.flags=create (measured on SeaweedFS). This store writes each commit file
 * through that builder, so the store refuses a second writer of one version; the refusal (412,
 * s3a's RemoteFileChangedException) becomes the FileAlreadyExistsException Delta expects of a
 * concurrent commit.
 */
package io.tidemark.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

public class S3ConditionalLogStore extends HadoopFileSystemLogStore {
  static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

  public S3ConditionalLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(path).overwrite(overwrite);
    if (!overwrite) {
      builder = builder.must(CONDITIONAL_CREATE, true);
    }
    try (FSDataOutputStream out = builder.build()) { // the PUT happens in close()
      while (actions.hasNext()) {
        out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
      }
    } catch (org.apache.hadoop.fs.FileAlreadyExistsException e) {
      throw refused(path, e);
    } catch (IOException e) {
      if (!overwrite && isPreconditionFailure(e)) {
        throw refused(path, e);
      }
      throw e;
    }
  }

  private static FileAlreadyExistsException refused(Path path, Throwable cause) {
    FileAlreadyExistsException refused =
        new FileAlreadyExistsException(path.toString(), null, "another writer committed this version first");
    refused.initCause(cause);
    return refused;
  }

  private static boolean isPreconditionFailure(Throwable error) {
    for (Throwable t = error; t != null; t = t.getCause()) {
      if (t.getClass().getName().equals("org.apache.hadoop.fs.s3a.RemoteFileChangedException")) {
        return true;
      }
      String message = t.getMessage();
      if (message != null && (message.contains("Status Code: 412") || message.contains("PreconditionFailed"))) {
        return true;
      }
    }
    return false;
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    return false; // a PUT is whole or absent
  }
}
