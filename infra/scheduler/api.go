package scheduler

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"
)

// Route is one route of the HTTP API and whether the gateway authorizes it.
type Route struct {
	Method awsapigatewayv2.HttpMethod
	Path   string
	// Public routes carry no gateway authorizer. The worker routes carry
	// `Authorization: Bearer <attempt token>`, which the handler checks and
	// which would collide with SigV4's own Authorization header.
	Public bool
}

// Routes lists the routes the construct creates. Everything else, the
// $default route included, is authorized by IAM (or JWT when configured),
// so a route the handler adds later is never public by accident.
func Routes() []Route {
	return []Route{
		{awsapigatewayv2.HttpMethod_GET, "/healthz", true},
		{awsapigatewayv2.HttpMethod_GET, "/v1/openapi.json", true},
		{awsapigatewayv2.HttpMethod_POST, "/v1/attempts/claim", true},
		{awsapigatewayv2.HttpMethod_POST, "/v1/attempts/heartbeat", true},
		{awsapigatewayv2.HttpMethod_POST, "/v1/attempts/complete", true},
		{awsapigatewayv2.HttpMethod_ANY, "/v1/jobs", false},
		{awsapigatewayv2.HttpMethod_ANY, "/v1/jobs/{proxy+}", false},
		{awsapigatewayv2.HttpMethod_ANY, "/v1/runs", false},
		{awsapigatewayv2.HttpMethod_ANY, "/v1/runs/{proxy+}", false},
	}
}

func (s *Scheduler) newAPI(p Props, fn awslambda.IFunction) awsapigatewayv2.HttpApi {
	api := awsapigatewayv2.NewHttpApi(s.Construct, jsii.String("Api"), &awsapigatewayv2.HttpApiProps{
		Description:        jsii.String("runledger HTTP API v1"),
		CreateDefaultStage: jsii.Bool(true),
	})
	integration := awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String("ApiIntegration"), fn,
		&awsapigatewayv2integrations.HttpLambdaIntegrationProps{
			PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0(),
		})

	var operator awsapigatewayv2.IHttpRouteAuthorizer = awsapigatewayv2authorizers.NewHttpIamAuthorizer()
	if p.JWT != nil {
		operator = awsapigatewayv2authorizers.NewHttpJwtAuthorizer(jsii.String("JwtAuthorizer"), jsii.String(p.JWT.Issuer),
			&awsapigatewayv2authorizers.HttpJwtAuthorizerProps{JwtAudience: jsii.Strings(p.JWT.Audiences...)})
	}
	public := awsapigatewayv2.NewHttpNoneAuthorizer()

	for _, r := range Routes() {
		authorizer := operator
		if r.Public {
			authorizer = public
		}
		api.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(r.Path),
			Methods:     &[]awsapigatewayv2.HttpMethod{r.Method},
			Integration: integration,
			Authorizer:  authorizer,
		})
	}
	awsapigatewayv2.NewHttpRoute(s.Construct, jsii.String("ApiDefaultRoute"), &awsapigatewayv2.HttpRouteProps{
		HttpApi:     api,
		RouteKey:    awsapigatewayv2.HttpRouteKey_DEFAULT(),
		Integration: integration,
		Authorizer:  operator,
	})
	return api
}
