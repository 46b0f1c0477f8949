package io.tidemark.rest;

import jakarta.servlet.ServletException;
import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;
import java.io.ByteArrayOutputStream;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.regex.Pattern;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

/**
 * Apache Iceberg's REST catalog (its own RESTCatalogAdapter and RESTCatalogServlet, a JDBC
 * catalog behind them) for development and tests, as iceberg-open-api's RESTCatalogServer
 * runs it, with three differences that fixture lacks:
 *
 * <ul>
 *   <li>it listens on the host it is given (127.0.0.1), not on every interface;
 *   <li>it checks OAuth2 client credentials and bearer tokens as production catalogs do
 *       (Polaris, Unity, Lakekeeper): the client secret and the token come from the
 *       environment (TIDEMARK_REST_CLIENT_SECRET, TIDEMARK_REST_TOKEN), never from a file;
 *   <li>one-shot faults for the tests, from files in a directory: "commit-409" refuses the
 *       next table commit as a lost race; "commit-stall" applies it, then holds the answer
 *       for the file's number of seconds (a client that times out does not know the outcome).
 * </ul>
 *
 * <p>Its one argument is a properties file: host, port, auth.client-id (optional),
 * faults.dir (optional), and catalog.* (the JDBC catalog's properties: catalog.uri,
 * catalog.warehouse, ...).
 */
public final class LocalRestCatalog {
  private static final Pattern COMMIT =
      Pattern.compile("^/v1/(?:[^/]+/)?(?:namespaces/[^/]+/tables/[^/]+|transactions/commit)$");
  private static final String TOKENS = "/v1/oauth/tokens";

  private LocalRestCatalog() {}

  public static void main(String[] args) throws Exception {
    Properties conf = new Properties();
    try (InputStream in = new FileInputStream(args[0])) {
      conf.load(in);
    }
    Map<String, String> catalogProps = new HashMap<>();
    for (String name : conf.stringPropertyNames()) {
      if (name.startsWith("catalog.")) {
        catalogProps.put(name.substring("catalog.".length()), conf.getProperty(name));
      }
    }
    catalogProps.putIfAbsent(CatalogUtil.ICEBERG_CATALOG_TYPE, "jdbc");
    Catalog backend = CatalogUtil.buildIcebergCatalog("rest_backend", catalogProps, new Configuration());
    Guarded servlet =
        new Guarded(
            new RESTCatalogAdapter(backend),
            conf.getProperty("auth.client-id", ""),
            System.getenv().getOrDefault("TIDEMARK_REST_CLIENT_SECRET", ""),
            System.getenv().getOrDefault("TIDEMARK_REST_TOKEN", ""),
            conf.getProperty("faults.dir", ""));
    ServletContextHandler context = new ServletContextHandler();
    context.setContextPath("/");
    context.addServlet(new ServletHolder(servlet), "/*");
    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost(conf.getProperty("host", "127.0.0.1"));
    connector.setPort(Integer.parseInt(conf.getProperty("port", "8181")));
    server.addConnector(connector);
    server.setHandler(context);
    server.start();
    System.out.printf(
        "tidemark: Iceberg REST catalog on http://%s:%s/ (auth: %s)%n",
        connector.getHost(), connector.getPort(), servlet.token.isEmpty() ? "none" : "OAuth2 / bearer");
    server.join();
  }

  /** The catalog's servlet behind the credential check and the test faults. */
  static final class Guarded extends RESTCatalogServlet {
    private final String clientId;
    private final String clientSecret;
    final String token;
    private final String faultsDir;

    Guarded(RESTCatalogAdapter adapter, String clientId, String clientSecret, String token, String faultsDir) {
      super(adapter);
      this.clientId = clientId;
      this.clientSecret = clientSecret;
      this.token = token;
      this.faultsDir = faultsDir;
    }

    @Override
    protected void service(HttpServletRequest request, HttpServletResponse response)
        throws ServletException, IOException {
      String path = request.getRequestURI();
      if (!token.isEmpty()) {
        if (TOKENS.equals(path)) {
          issueToken(request, response);
          return;
        }
        String presented = request.getHeader("Authorization");
        if (presented == null || !same(presented, "Bearer " + token)) {
          error(response, 401, "NotAuthorizedException", "Not authorized: a valid bearer token is required");
          return;
        }
      }
      boolean commit = "POST".equals(request.getMethod()) && COMMIT.matcher(path).matches();
      if (commit && take("commit-409") != null) {
        error(response, 409, "CommitFailedException", "Commit failed: refused by a test fault (commit-409)");
        return;
      }
      String stall = commit ? take("commit-stall") : null;
      if (stall == null) {
        super.service(request, response);
        return;
      }
      // applied, then the answer held: the client times out and cannot know the outcome
      HeldResponse held = new HeldResponse(response);
      super.service(request, held);
      sleep(stall);
      held.release();
    }

    private void issueToken(HttpServletRequest request, HttpServletResponse response) throws IOException {
      // the client authenticates in the form (client_secret_post) or by HTTP Basic
      // (client_secret_basic, which RFC 6749 section 2.3.1 requires a server to accept)
      String id = String.valueOf(request.getParameter("client_id"));
      String secret = String.valueOf(request.getParameter("client_secret"));
      String basic = request.getHeader("Authorization");
      if (basic != null && basic.startsWith("Basic ")) {
        String pair = new String(Base64.getDecoder().decode(basic.substring(6).trim()), StandardCharsets.UTF_8);
        int colon = pair.indexOf(':');
        id = URLDecoder.decode(pair.substring(0, Math.max(colon, 0)), StandardCharsets.UTF_8);
        secret = URLDecoder.decode(pair.substring(colon + 1), StandardCharsets.UTF_8);
      }
      boolean valid =
          "client_credentials".equals(request.getParameter("grant_type"))
              && same(id, clientId)
              && same(secret, clientSecret)
              && !clientId.isEmpty();
      if (!valid) {
        response.setStatus(401);
        response.setContentType("application/json");
        response.getWriter().write("{\"error\":\"invalid_client\",\"error_description\":\"Invalid credentials\"}");
        return;
      }
      response.setStatus(200);
      response.setContentType("application/json");
      response.getWriter()
          .write(
              "{\"access_token\":\"" + token + "\",\"token_type\":\"bearer\","
                  + "\"issued_token_type\":\"urn:ietf:params:oauth:token-type:access_token\",\"expires_in\":3600}");
    }

    private static boolean same(String a, String b) {
      return MessageDigest.isEqual(a.getBytes(StandardCharsets.UTF_8), b.getBytes(StandardCharsets.UTF_8));
    }

    private static void error(HttpServletResponse response, int code, String type, String message)
        throws IOException {
      response.setStatus(code);
      response.setContentType("application/json");
      response.getWriter()
          .write(
              "{\"error\":{\"message\":\"" + message + "\",\"type\":\"" + type + "\",\"code\":" + code + "}}");
    }

    /** The fault file's content, once (deleted here), or null when there is none. */
    private String take(String name) throws IOException {
      if (faultsDir.isEmpty()) {
        return null;
      }
      Path fault = Paths.get(faultsDir, name);
      String content;
      try {
        content = Files.readString(fault).trim();
        Files.delete(fault);
      } catch (java.nio.file.NoSuchFileException gone) {
        return null;
      }
      System.out.printf("tidemark: test fault %s taken%n", name);
      return content;
    }

    private static void sleep(String seconds) {
      try {
        Thread.sleep((long) (Double.parseDouble(seconds.isEmpty() ? "30" : seconds) * 1000));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  /** A response whose body is kept until {@link #release}: nothing reaches the client before. */
  static final class HeldResponse extends HttpServletResponseWrapper {
    private final ByteArrayOutputStream body = new ByteArrayOutputStream();
    private final PrintWriter writer = new PrintWriter(new OutputStreamWriter(body, StandardCharsets.UTF_8));
    private final ServletOutputStream stream =
        new ServletOutputStream() {
          @Override
          public void write(int b) {
            body.write(b);
          }

          @Override
          public boolean isReady() {
            return true;
          }

          @Override
          public void setWriteListener(WriteListener listener) {}
        };

    HeldResponse(HttpServletResponse response) {
      super(response);
    }

    @Override
    public PrintWriter getWriter() {
      return writer;
    }

    @Override
    public ServletOutputStream getOutputStream() {
      return stream;
    }

    @Override
    public void flushBuffer() {}

    void release() throws IOException {
      writer.flush();
      getResponse().getOutputStream().write(body.toByteArray());
      getResponse().flushBuffer();
    }
  }
}
